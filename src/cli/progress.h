// The training progress display. When stderr is a terminal: one live line on stderr, redrawn in place
// with \r on each update,
//
//   [#####...............] step 120/2000 loss 2.3412 lr 9.9e-04 41.2k tok/s ETA 1:02
//
// and message() lines printed to stdout above it without breaking it. Otherwise (a pipe, a file, or
// force_plain) every update is one plain line on stdout, for logs and scripts:
//
//   step 120/2000 loss 2.341234 lr 9.90e-04 tok/s 41234 eta 62s
//
// The ETA is the rate between the first update seen and the latest one (so a resumed run, or a slow
// first step, does not skew it) times the steps left; until there are two updates it is "?". The
// caller decides how often to update.
#pragma once

#include <cstdint>
#include <string>

namespace tformer::cli {

class Progress {
 public:
  explicit Progress(int64_t total_steps, bool force_plain = false);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // step: steps done so far (1..total); seconds_elapsed: wall time since any fixed origin.
  void update(int64_t step, double loss, double lr, double tokens_per_s, double seconds_elapsed);
  // One whole line (no newline needed), e.g. a validation result.
  void message(const std::string& line);
  // Ends the live line (a newline on stderr); later calls print plain lines again. Called by the
  // destructor when not called before.
  void finish();

  bool live() const { return live_; }

  // Formatting, exposed for tests.
  static std::string format_eta(double seconds);  // "1:02", "1:02:03", "?" when unknown (< 0)
  static std::string format_rate(double per_s);   // "950", "41.2k", "1.23M"
  std::string plain_line(int64_t step, double loss, double lr, double tokens_per_s, double eta_s) const;
  // The live line with a full-width bar; draw() narrows the bar to fit the terminal.
  std::string live_line(int64_t step, double loss, double lr, double tokens_per_s, double eta_s) const;
  // What draw() prints for a terminal `columns` wide (one column is kept free): the bar narrowed to
  // the room left by the fields, left out below 5 characters, then the fields cut; never wider.
  static std::string fit_line(double fraction, const std::string& fields, int columns);

 private:
  double eta_seconds(int64_t step, double seconds_elapsed);
  double fraction(int64_t step) const;
  std::string live_fields(int64_t step, double loss, double lr, double tokens_per_s, double eta_s) const;
  void draw();

  int64_t total_;
  bool live_;
  bool drawn_ = false;  // a live line is on screen
  bool have_first_ = false;
  int64_t first_step_ = 0;
  double first_seconds_ = 0;
  double last_fraction_ = 0;
  std::string last_fields_;  // the live line after the bar
};

}  // namespace tformer::cli
