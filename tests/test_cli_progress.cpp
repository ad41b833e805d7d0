// The training progress display (cli/progress.h): the plain lines, the number formats and how the
// live line fits any terminal width. Nothing here is timed.
#include <gtest/gtest.h>

#include <string>

#include "cli/progress.h"

namespace tformer::cli {
namespace {

TEST(Progress, PlainLinesAndFormats) {
  EXPECT_EQ(Progress::format_eta(62), "1:02");
  EXPECT_EQ(Progress::format_eta(3723), "1:02:03");
  EXPECT_EQ(Progress::format_eta(-1), "?");
  EXPECT_EQ(Progress::format_rate(950), "950");
  EXPECT_EQ(Progress::format_rate(41234), "41.2k");
  EXPECT_EQ(Progress::format_rate(1234567), "1.23M");

  Progress p(2000, /*force_plain=*/true);
  EXPECT_FALSE(p.live());
  EXPECT_EQ(p.plain_line(120, 2.3412346, 9.9e-4, 41234.4, 62.2),
            "step 120/2000 loss 2.341235 lr 9.90e-04 tok/s 41234 eta 62s");
  EXPECT_EQ(p.live_line(120, 2.3412346, 9.9e-4, 41234.4, 62.2),
            "[#...................] step 120/2000 loss 2.3412 lr 9.9e-04 41.2k tok/s ETA 1:02");

  testing::internal::CaptureStdout();
  p.update(100, 3.0, 1e-3, 1000, 10.0);  // first update: no rate yet
  p.message("step 100: val loss 3.1");
  p.update(200, 2.5, 1e-3, 1000, 20.0);  // 10 s per 100 steps, 1800 steps left
  p.finish();
  EXPECT_EQ(testing::internal::GetCapturedStdout(),
            "step 100/2000 loss 3.000000 lr 1.00e-03 tok/s 1000 eta ?\n"
            "step 100: val loss 3.1\n"
            "step 200/2000 loss 2.500000 lr 1.00e-03 tok/s 1000 eta 180s\n");
}

// The live line fits any terminal: the bar narrows to the room the fields leave (a terminal of
// `columns` keeps its last column free, so \r returns to the line's start), disappears below 5
// characters, then the fields are cut; the line is never wider than asked.
TEST(Progress, LiveLineFitsTheTerminal) {
  Progress p(2000, /*force_plain=*/true);
  const std::string full = p.live_line(120, 2.3412346, 9.9e-4, 41234.4, 62.2);
  const std::string fields = full.substr(23);  // after "[" + 20 bar characters + "] "
  ASSERT_EQ(fields.substr(0, 9), "step 120/");
  const double frac = 120.0 / 2000.0;
  const int L = static_cast<int>(fields.size());
  EXPECT_EQ(Progress::fit_line(frac, fields, 200), full);                             // room for the full bar
  EXPECT_EQ(Progress::fit_line(frac, fields, L + 3 + 20), full);                      // exactly
  EXPECT_EQ(Progress::fit_line(frac, fields, L + 3 + 10), "[..........] " + fields);  // 10-wide bar
  EXPECT_EQ(Progress::fit_line(0.5, fields, L + 3 + 10), "[#####.....] " + fields);
  EXPECT_EQ(Progress::fit_line(frac, fields, L + 3 + 5), "[.....] " + fields);  // the narrowest bar
  EXPECT_EQ(Progress::fit_line(frac, fields, L + 3 + 4), fields);               // no bar
  EXPECT_EQ(Progress::fit_line(frac, fields, 20), fields.substr(0, 20));        // fields cut
  EXPECT_EQ(Progress::fit_line(frac, fields, 0), fields.substr(0, 1));          // never empty-width
  for (int columns = 1; columns < 120; ++columns)
    EXPECT_LE(Progress::fit_line(0.7, fields, columns).size(), static_cast<size_t>(columns)) << columns;
}

}  // namespace
}  // namespace tformer::cli
