// The command line's help and usage errors: `loom --help` lists every command's synopsis
// (made from its options) with what it does; a usage error says what is wrong, with a
// did-you-mean for a misspelt command, and where to read how it goes.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace loom::cli {

std::string loom_help(const CLI::App& loom);

// The help of `loom` and of each command, in Loom's layout.
class Help : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode) const override;
  // The synopsis has said what the positionals are.
  std::string make_option_opts(const CLI::Option* o) const override;
  // CLI11 names a flag with a value "--resume{latest}"; the synopsis shows how it is used.
  std::string make_option_name(const CLI::Option* o, bool positional) const override;
};

// Prints the error of a command line that does not parse and returns 2 (a command that fails
// exits 1). Checks after parsing throw CLI::ValidationError for this.
int usage_error(const CLI::App& loom, const CLI::ParseError& e);

}  // namespace loom::cli
