#include "cli/progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tformer::cli {

namespace {

// Columns of the terminal on stderr (80 when unknown).
int terminal_columns() {
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

constexpr int kBarWidth = 20;

// "[#####.....] " for a fraction done, `width` characters between the brackets.
std::string bar_text(double frac, int width) {
  const int filled = static_cast<int>(std::clamp(frac, 0.0, 1.0) * width);
  std::string bar(static_cast<size_t>(width) + 3, '.');
  bar.front() = '[';
  std::fill_n(bar.begin() + 1, filled, '#');
  bar[bar.size() - 2] = ']';
  bar.back() = ' ';
  return bar;
}

}  // namespace

Progress::Progress(int64_t total_steps, bool force_plain)
    : total_(total_steps), live_(!force_plain && isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() { finish(); }

std::string Progress::format_eta(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string Progress::format_rate(double per_s) {
  if (!std::isfinite(per_s) || per_s < 0) return "?";
  if (per_s < 1e3) return fmt::format("{:.0f}", per_s);
  if (per_s < 1e6) return fmt::format("{:.1f}k", per_s / 1e3);
  if (per_s < 1e9) return fmt::format("{:.2f}M", per_s / 1e6);
  return fmt::format("{:.2f}G", per_s / 1e9);
}

std::string Progress::plain_line(int64_t step, double loss, double lr, double tokens_per_s, double eta_s) const {
  const std::string eta = eta_s >= 0 && std::isfinite(eta_s) ? fmt::format("{}s", std::llround(eta_s)) : "?";
  return fmt::format("step {}/{} loss {:.6f} lr {:.2e} tok/s {:.0f} eta {}", step, total_, loss, lr,
                     std::isfinite(tokens_per_s) ? tokens_per_s : 0.0, eta);
}

double Progress::fraction(int64_t step) const {
  return total_ > 0 ? static_cast<double>(step) / static_cast<double>(total_) : 0.0;
}

std::string Progress::live_fields(int64_t step, double loss, double lr, double tokens_per_s, double eta_s) const {
  return fmt::format("step {}/{} loss {:.4f} lr {:.1e} {} tok/s ETA {}", step, total_, loss, lr,
                     format_rate(tokens_per_s), format_eta(eta_s));
}

std::string Progress::live_line(int64_t step, double loss, double lr, double tokens_per_s, double eta_s) const {
  return bar_text(fraction(step), kBarWidth) + live_fields(step, loss, lr, tokens_per_s, eta_s);
}

double Progress::eta_seconds(int64_t step, double seconds_elapsed) {
  if (!have_first_) {
    have_first_ = true;
    first_step_ = step;
    first_seconds_ = seconds_elapsed;
    return -1;
  }
  if (step <= first_step_ || seconds_elapsed < first_seconds_) return -1;
  const double per_step = (seconds_elapsed - first_seconds_) / static_cast<double>(step - first_step_);
  return per_step * static_cast<double>(std::max<int64_t>(total_ - step, 0));
}

void Progress::update(int64_t step, double loss, double lr, double tokens_per_s, double seconds_elapsed) {
  const double eta = eta_seconds(step, seconds_elapsed);
  if (!live_) {
    fmt::print(stdout, "{}\n", plain_line(step, loss, lr, tokens_per_s, eta));
    std::fflush(stdout);
    return;
  }
  last_fraction_ = fraction(step);
  last_fields_ = live_fields(step, loss, lr, tokens_per_s, eta);
  draw();
}

std::string Progress::fit_line(double fraction, const std::string& fields, int columns) {
  // Fit the terminal, or the line would wrap and \r would no longer return to its start: the bar
  // narrows first (and is left out below 5 characters), then the fields are cut.
  columns = std::max(columns, 1);
  const int room = columns - static_cast<int>(fields.size()) - 3;
  std::string line = room >= 5 ? bar_text(fraction, std::min(room, kBarWidth)) : std::string();
  line += fields;
  if (line.size() > static_cast<size_t>(columns)) line.resize(columns);
  return line;
}

void Progress::draw() {
  const std::string line = fit_line(last_fraction_, last_fields_, terminal_columns() - 1);
  fmt::print(stderr, "\r{}\x1b[K", line);
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::message(const std::string& line) {
  if (live_ && drawn_) {
    fmt::print(stderr, "\r\x1b[K");
    std::fflush(stderr);
  }
  fmt::print(stdout, "{}\n", line);
  std::fflush(stdout);
  if (live_ && drawn_) draw();
}

void Progress::finish() {
  if (live_ && drawn_) {
    fmt::print(stderr, "\n");
    std::fflush(stderr);
  }
  drawn_ = false;
  live_ = false;
}

}  // namespace tformer::cli
