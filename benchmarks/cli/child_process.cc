#include "cli/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

extern char** environ;

namespace deltacast::bench {

namespace {
constexpr size_t kLinesKept = 4096;
}  // namespace

std::string executable_dir() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string(".") : self.parent_path().string();
}

std::string find_helper_script(const std::string& name) {
  // Beside the executable (the build copies them there), else in its job's folder of the sources.
  if (const std::string path = executable_dir() + "/" + name; std::filesystem::exists(path)) return path;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(std::string(DELTACAST_SOURCE_DIR) + "/benchmarks", error)) {
    if (entry.path().filename() == name) return entry.path().string();
  }
  return "";
}

Result<std::string> find_python_with(const std::string& module) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("DELTACAST_PYTHON")) candidates.push_back(env);
  candidates.push_back("python3");
  candidates.push_back("/usr/bin/python3");
  for (const auto& python : candidates) {
    auto probe = ChildProcess::spawn({python, "-c", "import " + module}, false, nullptr, /*quiet=*/true);
    if (!probe.ok()) continue;
    auto status = (*probe)->wait(std::chrono::seconds(180));
    if (status.ok() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) return python;
  }
  return unavailable("no Python with {} found (tried $DELTACAST_PYTHON, python3, /usr/bin/python3)", module);
}

Result<std::unique_ptr<ChildProcess>> ChildProcess::spawn(const std::vector<std::string>& argv, bool with_stdin,
                                                          OnLine on_line, bool quiet) {
  if (argv.empty()) return invalid_argument("no command to run");
  int out[2], in[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0) return io_error("pipe: {}", std::strerror(errno));
  if (with_stdin && pipe2(in, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return io_error("pipe: {}", std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  if (with_stdin) {
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  if (quiet) posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (with_stdin) ::close(in[0]);
  if (rc != 0) {
    ::close(out[0]);
    if (with_stdin) ::close(in[1]);
    return io_error("cannot start '{}': {}", argv[0], std::strerror(rc));
  }
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->pid_ = pid;
  child->stdout_fd_ = out[0];
  child->stdin_fd_ = with_stdin ? in[1] : -1;
  child->on_line_ = std::move(on_line);
  child->reader_ = std::thread([raw = child.get()] { raw->read_loop(); });
  return child;
}

ChildProcess::~ChildProcess() {
  terminate();
  if (reader_.joinable()) reader_.join();
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
}

void ChildProcess::read_loop() {
  std::string pending;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(stdout_fd_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<size_t>(n));
    size_t at;
    while ((at = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, at);
      pending.erase(0, at + 1);
      if (on_line_) on_line_(line);
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(std::move(line));
      if (lines_.size() > kLinesKept) lines_.pop_front();
      cv_.notify_all();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  eof_ = true;
  cv_.notify_all();
}

Status ChildProcess::write_line(const std::string& line) {
  if (stdin_fd_ < 0) return failed_precondition("the child's stdin is not a pipe");
  const std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(stdin_fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error("writing to child {}: {}", pid_, std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status();
}

Result<std::string> ChildProcess::read_line(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !lines_.empty() || eof_; })) {
    return deadline_exceeded("no answer from child {} within {} ms", pid_, timeout.count());
  }
  if (lines_.empty()) return unavailable("child {} closed its output", pid_);
  std::string line = std::move(lines_.front());
  lines_.pop_front();
  return line;
}

void ChildProcess::close_stdin() {
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  stdin_fd_ = -1;
}

Result<int> ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (reaped_) return status_;
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const pid_t r = waitpid(pid_, &status_, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return status_;
    }
    if (r < 0) return io_error("waitpid {}: {}", pid_, std::strerror(errno));
    if (std::chrono::steady_clock::now() > until) return deadline_exceeded("child {} still running", pid_);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int ChildProcess::terminate(std::chrono::milliseconds grace) {
  if (reaped_ || pid_ <= 0) return status_;
  close_stdin();
  ::kill(pid_, SIGTERM);
  if (!wait(grace).ok()) {
    ::kill(pid_, SIGKILL);
    (void)wait(std::chrono::milliseconds(10000));
  }
  return status_;
}

}  // namespace deltacast::bench
