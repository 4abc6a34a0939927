#pragma once
// HMC's logger: spdlog, level from HMC_LOG_LEVEL, and an optional user hook that receives every line.
#include <functional>
#include <string_view>

#include <spdlog/logger.h>

namespace hmc::runtime {

enum class LogLevel { trace, debug, info, warn, error, off };

// The process-wide "hmc" logger; created on first use with the level from HMC_LOG_LEVEL (default warn).
spdlog::logger& log();

void set_log_level(LogLevel level);
LogLevel log_level();

// Parses "trace|debug|info|warn|error|off" (case-insensitive); false when the text is none of them.
bool parse_log_level(std::string_view text, LogLevel& out);

// While a hook is set, every log line goes to it instead of stderr; an empty hook restores stderr.
using LogHook = std::function<void(LogLevel, std::string_view message)>;
void set_log_hook(LogHook hook);

}  // namespace hmc::runtime
