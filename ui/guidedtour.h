#pragma once
// Help → Guided tour: a short walk through the four tabs for people new to LSTM chatbots. Each
// page switches the window to the tab it explains; the dialog is not modal, so the tab can be
// tried while its page is open.

#include <QDialog>

class QLabel;
class QPushButton;
class QTabWidget;

class GuidedTour : public QDialog {
    Q_OBJECT

public:
    GuidedTour(QTabWidget* tabs, QWidget* parent = nullptr);

    int page() const { return m_page; }
    int pages() const;
    void showPage(int page); // clamps to the pages there are

private:
    QTabWidget* m_tabs;
    QLabel* m_title = nullptr;
    QLabel* m_text = nullptr;
    QLabel* m_counter = nullptr;
    QPushButton* m_back = nullptr;
    QPushButton* m_next = nullptr;
    int m_page = 0;
};
