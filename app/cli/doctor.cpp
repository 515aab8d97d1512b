// chatbench-cli doctor — versions, devices, the handoff self-test and CPU↔CUDA parity.

#include "chatbench/doctor.h"
#include "common.h"

#include <iostream>
#include <memory>

namespace cli {

void addDoctorCommand(CLI::App& app, int& exitCode)
{
    auto json = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("doctor", "Versions, devices, and the handoff checks on a tiny model");
    cmd->add_flag("--json", *json, "Print JSON");
    cmd->callback([json, &exitCode] {
        const chatbench::DoctorReport d = chatbench::runDoctor();
        std::cout << (*json ? chatbench::toJson(d) : chatbench::describe(d));
        exitCode = d.healthy ? 0 : 1;
    });
}

} // namespace cli
