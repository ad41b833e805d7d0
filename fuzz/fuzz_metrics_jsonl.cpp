// libFuzzer target: a run's metrics.jsonl, read by the two readers of it: truncate_metrics_after
// (train/data.h: --resume drops the records after the checkpoint's step, keeps an unfinished last
// line out, and refuses any other line that is not a JSON object by file and line) and
// read_loss_curves (plot/loss_curves.h: `tformer plot` and the web page), whose curves are then
// drawn small. After a successful truncation the file must hold only whole JSON lines.
#include <cstdint>
#include <string>

#include "core/file_io.h"
#include "fuzz_util.h"
#include "plot/loss_curves.h"
#include "train/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tformer;
  const std::string path = fuzz::input_file(data, size, "jsonl");
  fuzz::expect_clean([&] {
    const LossCurves curves = read_loss_curves(path);
    fuzz::expect_clean([&] { render_loss_curves(curves, 64, 48); });
  });
  fuzz::expect_clean([&] {
    truncate_metrics_after(path, size % 7);
    const std::string kept = read_file(path);
    if (!kept.empty() && kept.back() != '\n') std::abort();
    size_t start = 0;
    while (start < kept.size()) {
      const size_t nl = kept.find('\n', start);
      const std::string line = kept.substr(start, nl - start);
      start = nl + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      if (!nlohmann::json::accept(line)) std::abort();
    }
  });
  return 0;
}
