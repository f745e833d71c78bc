// A child process for the benchmarks: started with posix_spawn, its stdout
// read line by line on a thread (lines queue up for read_line), stdin
// optionally a pipe, stderr shared with ours (or /dev/null when quiet). Terminated (SIGTERM, then
// SIGKILL after a grace period) and reaped when destroyed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"

namespace deltacast::bench {

class ChildProcess {
 public:
  using OnLine = std::function<void(const std::string&)>;

  // `on_line` (optional) sees every stdout line first, on the reader thread.
  static Result<std::unique_ptr<ChildProcess>> spawn(const std::vector<std::string>& argv, bool with_stdin,
                                                     OnLine on_line = nullptr, bool quiet = false);
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  Status write_line(const std::string& line);
  // The next stdout line, or an error when the child closed stdout or `timeout` passed.
  Result<std::string> read_line(std::chrono::milliseconds timeout);
  void close_stdin();
  // SIGTERM, then SIGKILL after `grace`; returns the exit status (as waitpid reports it).
  int terminate(std::chrono::milliseconds grace = std::chrono::milliseconds(3000));
  // Waits for the child to exit on its own.
  Result<int> wait(std::chrono::milliseconds timeout);

 private:
  ChildProcess() = default;
  void read_loop();

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  OnLine on_line_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
  bool eof_ = false;
};

// The directory this executable lives in.
std::string executable_dir();
// A helper script of the benchmarks: next to the executable (the build copies them there), or in
// the source tree's benchmarks/ directory; "" when neither has it.
std::string find_helper_script(const std::string& name);
// The first Python interpreter that imports `module`: $DELTACAST_PYTHON, python3, /usr/bin/python3.
Result<std::string> find_python_with(const std::string& module);

}  // namespace deltacast::bench
