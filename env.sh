wid() { xdotool search --name "LSTM chatbot workbench" | head -1; }
