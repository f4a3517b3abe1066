// `frugal kv`: the quantized KV cache demo (being written).
#include "commands.h"

namespace frugal::tools {
void add_kv_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("kv", "quantize a synthetic K/V stream (not written yet)");
  cmd->callback([] { FRUGAL_FAIL(unsupported, "frugal kv", "not written yet"); });
}
}  // namespace frugal::tools
