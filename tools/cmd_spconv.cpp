// `frugal spconv`: the sparse voxel convolution demo (being written).
#include "commands.h"

namespace frugal::tools {
void add_spconv_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("spconv", "sparse voxel convolution demo (not written yet)");
  cmd->callback([] { FRUGAL_FAIL(unsupported, "frugal spconv", "not written yet"); });
}
}  // namespace frugal::tools
