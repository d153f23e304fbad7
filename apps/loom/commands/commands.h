// The `loom` commands, one file each in apps/loom/commands/: each adds its subcommand to
// `loom`, with its options, and runs when it is the one given (a CLI11 callback that sets the
// process's exit status in `code`). main.cpp only registers them.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "loom/train/config.h"

namespace loom::cli {

constexpr const char* kCheckpointHelp = "a step-NNNNNN directory, or a run directory (its latest)";

void add_train_command(CLI::App& loom, int& code);
void add_sample_command(CLI::App& loom, int& code);
void add_eval_command(CLI::App& loom, int& code);
void add_cluster_command(CLI::App& loom, int& code);
void add_tokenizer_commands(CLI::App& loom, int& code);  // tokenizer train, check, convert
void add_report_command(CLI::App& loom, int& code);
void add_config_commands(CLI::App& loom, int& code);  // config keys
void add_data_commands(CLI::App& loom, int& code);    // data prepare
void add_ckpt_commands(CLI::App& loom, int& code);    // ckpt export, verify
void add_launch_command(CLI::App& loom, int& code);
void add_bench_command(CLI::App& loom, int& code);

// Parses args (the words after the program's name, or after a command's) into app's options.
void parse_args(CLI::App& app, std::vector<std::string> args);

// The config of a `loom train` command's words (`launch --max-restarts` supervises its run
// directory; `--min-ranks` plans a smaller layout from its batch and parallel degrees).
train::Config train_config(const std::vector<std::string>& train_args);

}  // namespace loom::cli
