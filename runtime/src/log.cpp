#include "hmc/runtime/log.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace hmc::runtime {
namespace {

LogLevel from_spdlog(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace: return LogLevel::trace;
    case spdlog::level::debug: return LogLevel::debug;
    case spdlog::level::info: return LogLevel::info;
    case spdlog::level::warn: return LogLevel::warn;
    case spdlog::level::err:
    case spdlog::level::critical: return LogLevel::error;
    default: return LogLevel::off;
  }
}

spdlog::level::level_enum to_spdlog(LogLevel l) {
  switch (l) {
    case LogLevel::trace: return spdlog::level::trace;
    case LogLevel::debug: return spdlog::level::debug;
    case LogLevel::info: return spdlog::level::info;
    case LogLevel::warn: return spdlog::level::warn;
    case LogLevel::error: return spdlog::level::err;
    case LogLevel::off: return spdlog::level::off;
  }
  return spdlog::level::off;
}

// Routes each formatted line to the user's hook when one is set, else to stderr.
class HookOrStderrSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void set_hook(LogHook hook) {
    std::lock_guard<std::mutex> lock(mutex_);
    hook_ = std::move(hook);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (hook_) {
      hook_(from_spdlog(msg.level), std::string_view(msg.payload.data(), msg.payload.size()));
      return;
    }
    stderr_.log(msg);
  }
  void flush_() override { stderr_.flush(); }

 private:
  LogHook hook_;
  spdlog::sinks::stderr_color_sink_st stderr_;
};

struct LoggerState {
  std::shared_ptr<HookOrStderrSink> sink = std::make_shared<HookOrStderrSink>();
  std::shared_ptr<spdlog::logger> logger = std::make_shared<spdlog::logger>("hmc", sink);
  LoggerState() {
    LogLevel level = LogLevel::warn;
    if (const char* env = std::getenv("HMC_LOG_LEVEL")) parse_log_level(env, level);
    logger->set_level(to_spdlog(level));
    logger->set_pattern("[%H:%M:%S.%f] [hmc] [%l] [t%t] %v");
  }
};

LoggerState& state() {
  static LoggerState s;
  return s;
}

}  // namespace

spdlog::logger& log() { return *state().logger; }

void set_log_level(LogLevel level) { state().logger->set_level(to_spdlog(level)); }

LogLevel log_level() { return from_spdlog(state().logger->level()); }

bool parse_log_level(std::string_view text, LogLevel& out) {
  std::string t(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (t == "trace") out = LogLevel::trace;
  else if (t == "debug") out = LogLevel::debug;
  else if (t == "info") out = LogLevel::info;
  else if (t == "warn" || t == "warning") out = LogLevel::warn;
  else if (t == "error" || t == "err") out = LogLevel::error;
  else if (t == "off" || t == "none") out = LogLevel::off;
  else return false;
  return true;
}

void set_log_hook(LogHook hook) { state().sink->set_hook(std::move(hook)); }

}  // namespace hmc::runtime
