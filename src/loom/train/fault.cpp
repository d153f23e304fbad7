#include "loom/train/fault.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "loom/core/error.h"

namespace loom::train {

namespace {

int64_t to_int(const std::string& text, const std::string& fault) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  LOOM_CHECK(!text.empty() && end && *end == 0 && v >= 0)
      << "LOOM_FAULT: '" << text << "' in '" << fault << "' is not a non-negative integer";
  return v;
}

}  // namespace

FaultPlan FaultPlan::from_env() {
  const char* spec = std::getenv("LOOM_FAULT");
  const char* attempt = std::getenv("LOOM_RESTART");
  return parse(spec ? spec : "", attempt ? int(to_int(attempt, "LOOM_RESTART")) : 0);
}

FaultPlan FaultPlan::parse(const std::string& spec, int attempt) {
  FaultPlan plan;
  std::stringstream faults(spec);
  std::string text;
  while (std::getline(faults, text, ';')) {
    const size_t first = text.find_first_not_of(" "), last = text.find_last_not_of(" ");
    if (first == std::string::npos) continue;
    text = text.substr(first, last - first + 1);
    const size_t colon = text.find(':');
    Fault f;
    f.kind = text.substr(0, colon);
    LOOM_CHECK(f.kind == "kill" || f.kind == "sleep" || f.kind == "slow" || f.kind == "nan" ||
               f.kind == "bitflip" || f.kind == "stall" || f.kind == "corrupt" ||
               f.kind == "truncate" || f.kind == "startup" || f.kind == "spike")
        << "LOOM_FAULT: unknown fault '" << f.kind
        << "' (expected kill, sleep, slow, nan, spike, bitflip, stall, startup, corrupt or "
           "truncate)";
    bool has_step = false;
    std::stringstream fields(colon == std::string::npos ? "" : text.substr(colon + 1));
    std::string field;
    while (std::getline(fields, field, ',')) {
      const size_t eq = field.find('=');
      LOOM_CHECK(eq != std::string::npos)
          << "LOOM_FAULT: '" << field << "' in '" << text << "' is not key=value";
      const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
      if (key == "rank") {
        f.rank = int(to_int(value, text));
      } else if (key == "step") {
        f.step = to_int(value, text);
        has_step = true;
      } else if (key == "ms") {
        f.ms = to_int(value, text);
      } else if (key == "factor") {
        char* end = nullptr;
        f.factor = std::strtod(value.c_str(), &end);
        LOOM_CHECK(end && *end == 0 && f.factor >= 1)
            << "LOOM_FAULT: factor '" << value << "' in '" << text << "' is not a number >= 1";
      } else if (key == "attempt") {
        f.attempt = value == "*" ? kEveryAttempt : int(to_int(value, text));
      } else if (key == "file") {
        f.file = value;
      } else if (key == "param") {
        f.param = value;
      } else {
        LOOM_FAIL() << "LOOM_FAULT: unknown key '" << key << "' in '" << text << "'";
      }
    }
    LOOM_CHECK(f.kind == "startup" ? !has_step : has_step && f.step > 0)
        << "LOOM_FAULT: '" << text << "' "
        << (f.kind == "startup" ? "takes no step" : "needs step=S (S >= 1)");
    LOOM_CHECK(f.kind != "spike" || f.factor > 1)
        << "LOOM_FAULT: '" << text << "' needs factor=F (F > 1)";
    LOOM_CHECK((f.kind != "sleep" && f.kind != "startup") || f.ms > 0)
        << "LOOM_FAULT: '" << text << "' needs ms=M";
    LOOM_CHECK((f.kind != "corrupt" && f.kind != "truncate") || !f.file.empty())
        << "LOOM_FAULT: '" << text << "' needs file=F (a file of the checkpoint directory)";
    if (f.attempt == attempt || f.attempt == kEveryAttempt) plan.faults_.push_back(f);
  }
  return plan;
}

void FaultPlan::at_step_begin(int64_t step, int rank) const {
  for (const Fault& f : faults_) {
    if (f.rank != rank) continue;
    if (f.kind == "kill" && f.step == step) {
      std::fprintf(stderr, "LOOM_FAULT: rank %d kills itself at step %lld\n", rank,
                   (long long)step);
      std::fflush(stderr);
      ::kill(::getpid(), SIGKILL);
    }
    if (f.kind == "stall" && f.step == step) {
      std::fprintf(stderr, "LOOM_FAULT: rank %d stalls at step %lld\n", rank, (long long)step);
      std::fflush(stderr);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
    }
    if (f.kind == "sleep" && step >= f.step)
      std::this_thread::sleep_for(std::chrono::milliseconds(f.ms));
  }
}

void FaultPlan::at_startup(int rank) const {
  for (const Fault& f : faults_)
    if (f.kind == "startup" && f.rank == rank) {
      std::fprintf(stderr, "LOOM_FAULT: rank %d starts up %lld ms late\n", rank, (long long)f.ms);
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::milliseconds(f.ms));
    }
}

bool FaultPlan::flips_bit(int64_t step, int rank, std::string* param) const {
  for (const Fault& f : faults_)
    if (f.kind == "bitflip" && f.rank == rank && f.step == step) {
      if (param) *param = f.param;
      return true;
    }
  return false;
}

double FaultPlan::slowdown(int64_t step, int rank) const {
  for (const Fault& f : faults_)
    if (f.kind == "slow" && f.rank == rank && step >= f.step) return f.factor;
  return 1;
}

double FaultPlan::spike(int64_t step) const {
  for (const Fault& f : faults_)
    if (f.kind == "spike" && f.step == step) return f.factor;
  return 1;
}

bool FaultPlan::poisons_loss(int64_t step, int rank) const {
  for (const Fault& f : faults_)
    if (f.kind == "nan" && f.rank == rank && f.step == step) return true;
  return false;
}

bool FaultPlan::damages_checkpoint(int64_t step) const {
  for (const Fault& f : faults_)
    if ((f.kind == "corrupt" || f.kind == "truncate") && f.step == step) return true;
  return false;
}

void FaultPlan::after_checkpoint(const std::string& dir, int64_t step, int rank) const {
  namespace fs = std::filesystem;
  for (const Fault& f : faults_) {
    if ((f.kind != "corrupt" && f.kind != "truncate") || f.step != step || rank != 0) continue;
    const fs::path path = fs::path(dir) / f.file;
    LOOM_CHECK(fs::exists(path)) << "LOOM_FAULT: " << path.string() << " does not exist";
    const auto size = fs::file_size(path);
    if (f.kind == "truncate") {
      fs::resize_file(path, size / 2);
    } else {
      std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
      file.seekg(std::streamoff(size / 2));
      const char c = char(file.get() ^ 0x20);
      file.seekp(std::streamoff(size / 2));
      file.put(c);
    }
    std::fprintf(stderr, "LOOM_FAULT: %s %s\n",
                 f.kind == "truncate" ? "truncated" : "flipped a byte of", path.string().c_str());
  }
}

}  // namespace loom::train
