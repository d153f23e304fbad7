// A link with a fixed delay each way, for kernels without sch_netem (tests/e2e/lowcomm/
// netns_rig.sh): each link is a pair of TAP devices, one end in each of two network namespaces,
// and this process moves every Ethernet frame from one end to the other DELAY after the kernel
// handed it over. The kernel's own qdisc on each TAP (tbf) still shapes the rate: a frame is
// handed over when the qdisc releases it, so rate limit, then delay, as netem would.
//
//   loom_delay_line DELAY_MS NS_A IF_A NS_B IF_B [NS_A IF_A NS_B IF_B ...]
//
// Creates the TAP devices (they vanish with this process), prints "ready" once all exist, and
// forwards until killed. The delay is the same for every frame, so frames leave in the order
// they came: a FIFO per direction, no reordering.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "loom_delay_line: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

// Opens a new TAP device `name` inside network namespace `ns` (a name of `ip netns`).
int open_tap(const std::string& ns, const std::string& name) {
  const std::string path = "/var/run/netns/" + ns;
  const int ns_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns_fd < 0) die("open " + path);
  if (setns(ns_fd, CLONE_NEWNET) != 0) die("setns " + ns);
  close(ns_fd);
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die("open /dev/net/tun");
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;  // whole Ethernet frames, no extra header
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) die("TUNSETIFF " + name + " in " + ns);
  return fd;
}

struct Frame {
  Clock::time_point due;
  std::vector<char> bytes;
};

// One direction of a link: frames read from `from` wait in `queue` until due, then go to `to`.
struct Direction {
  int from, to;
  std::deque<Frame> queue;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6 || (argc - 2) % 4 != 0) {
    std::fprintf(stderr, "usage: loom_delay_line DELAY_MS NS_A IF_A NS_B IF_B [...]\n");
    return 2;
  }
  const double delay_ms = std::atof(argv[1]);
  if (!(delay_ms >= 0)) {
    std::fprintf(stderr, "loom_delay_line: delay '%s' is not a number of milliseconds >= 0\n",
                 argv[1]);
    return 2;
  }
  const auto delay = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(delay_ms));
  std::vector<Direction> dirs;
  for (int i = 2; i < argc; i += 4) {
    const int a = open_tap(argv[i], argv[i + 1]), b = open_tap(argv[i + 2], argv[i + 3]);
    dirs.push_back({a, b, {}});
    dirs.push_back({b, a, {}});
  }
  std::printf("ready\n");
  std::fflush(stdout);

  std::vector<pollfd> fds(dirs.size());
  std::vector<char> buf(65536);
  int64_t dropped = 0;
  for (;;) {
    // Sleep until a frame arrives or the earliest queued one is due.
    Clock::time_point next = Clock::time_point::max();
    for (size_t d = 0; d < dirs.size(); ++d) {
      fds[d] = {dirs[d].from, POLLIN, 0};
      if (!dirs[d].queue.empty()) next = std::min(next, dirs[d].queue.front().due);
    }
    timespec wait{}, *timeout = nullptr;
    if (next != Clock::time_point::max()) {
      const auto ns = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::nanoseconds>(next - Clock::now()).count());
      wait = {time_t(ns / 1000000000), long(ns % 1000000000)};
      timeout = &wait;
    }
    if (ppoll(fds.data(), fds.size(), timeout, nullptr) < 0 && errno != EINTR) die("ppoll");
    for (size_t d = 0; d < dirs.size(); ++d) {
      if (!(fds[d].revents & POLLIN)) continue;
      for (;;) {  // everything the kernel has handed over so far
        const ssize_t n = read(dirs[d].from, buf.data(), buf.size());
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (n < 0) die("read");
        if (n == 0) break;
        dirs[d].queue.push_back(
            {Clock::now() + delay, std::vector<char>(buf.data(), buf.data() + n)});
      }
    }
    const Clock::time_point now = Clock::now();
    for (Direction& dir : dirs)
      while (!dir.queue.empty() && dir.queue.front().due <= now) {
        const std::vector<char>& f = dir.queue.front().bytes;
        // A frame the other end cannot take now (full, down, out of buffers) is dropped, as a
        // full link drops it; TCP sends it again. Only a closed descriptor ends the line.
        if (write(dir.to, f.data(), f.size()) < 0) {
          if (errno == EBADF) die("write");
          if (dropped++ == 0) std::fprintf(stderr, "loom_delay_line: dropping frames: %s\n",
                                           std::strerror(errno));
        }
        dir.queue.pop_front();
      }
  }
}
