// tformer bpe learn / tformer bpe apply: Sennrich character BPE, identical to subword-nmt 0.3.9.
//
//   tformer bpe learn --input corpus.txt --merges 10000 --output corpus.codes [--min-frequency 2] [--trace]
//   tformer bpe apply --codes corpus.codes [--input text.txt] [--output text.bpe] [--merges N]
//
// Learning reads its inputs as subword-nmt reads an --input file; applying reads an --input file
// the same way and standard input the way apply_bpe.py reads sys.stdin (\r\n and \r become \n).
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "tokenizer/sennrich_bpe.h"

namespace tformer::cli {

namespace {

struct LearnArgs {
  std::vector<std::string> inputs;
  int64_t merges = 0;
  int64_t min_frequency = 2;
  bool trace = false;
  std::string output;
};

struct ApplyArgs {
  std::string codes;
  std::string input = "-";
  std::string output = "-";
  int64_t merges = -1;
};

void run_learn(const LearnArgs& a) {
  BpeLearnOptions options;
  options.merges = a.merges;
  options.min_frequency = a.min_frequency;
  if (a.trace) {
    options.on_step = [](const BpeStep& s) {
      fmt::print(stderr, "step {}: {} + {} -> {} (count {}, vocab {})\n", s.step, s.first, s.second, s.symbol,
                 s.count, s.vocab_size);
    };
  }
  const BpeLearnResult result = learn_bpe(a.inputs, options);
  if (a.trace)
    fmt::print(stderr, "learned {} merges; vocabulary {} symbols before the first merge\n", result.merges.size(),
               result.initial_vocab_size);
  if (!result.stop_reason.empty()) fmt::print(stderr, "{}\n", result.stop_reason);
  const std::string codes = format_bpe_codes(result.merges);
  if (a.output == "-") {
    std::fwrite(codes.data(), 1, codes.size(), stdout);
    std::fflush(stdout);
  } else {
    text::write_file_atomic(a.output, codes);
  }
}

void run_apply(const ApplyArgs& a) {
  const SennrichBpe bpe = SennrichBpe::load(a.codes, a.merges);
  std::string input;
  text::LineMode mode = text::LineMode::kSplitlines;
  std::string name = a.input;
  if (a.input == "-") {
    char buffer[1 << 16];
    size_t got;
    while ((got = std::fread(buffer, 1, sizeof buffer, stdin)) > 0) input.append(buffer, got);
    if (std::ferror(stdin)) fail("<stdin>: read error");
    mode = text::LineMode::kUniversal;
    name = "<stdin>";
  } else {
    input = text::read_file(a.input);
  }
  const std::string out = bpe.apply_text(input, mode, name);
  if (a.output == "-") {
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  } else {
    text::write_file_atomic(a.output, out);
  }
}

}  // namespace

void register_bpe(CLI::App& app) {
  auto* bpe = app.add_subcommand("bpe", "Sennrich character BPE (subword-nmt compatible): learn, apply");
  bpe->require_subcommand(1);

  auto learn_args = std::make_shared<LearnArgs>();
  auto* learn = bpe->add_subcommand("learn", "Learn BPE merges from text (subword-nmt learn_bpe.py)");
  learn->add_option("--input", learn_args->inputs, "Input text file (UTF-8); repeat for several")->required();
  learn->add_option("--merges", learn_args->merges, "Number of merges to learn")->required()->check(CLI::NonNegativeNumber);
  learn->add_option("--min-frequency", learn_args->min_frequency, "Stop when no pair occurs this often (default 2)")
      ->check(CLI::PositiveNumber);
  learn->add_flag("--trace", learn_args->trace, "Print each merge step to stderr");
  learn->add_option("--output", learn_args->output, "Codes file to write ('-' for stdout)")->required();
  learn->callback([learn_args] { run_learn(*learn_args); });

  auto apply_args = std::make_shared<ApplyArgs>();
  auto* apply = bpe->add_subcommand("apply", "Segment text with learned merges (subword-nmt apply_bpe.py)");
  apply->add_option("--codes", apply_args->codes, "Codes file written by 'bpe learn' or subword-nmt")->required();
  apply->add_option("--input", apply_args->input, "Input text (default: stdin)");
  apply->add_option("--output", apply_args->output, "Output file (default: stdout)");
  apply->add_option("--merges", apply_args->merges, "Use only the first N merges (default: all)");
  apply->callback([apply_args] { run_apply(*apply_args); });
}

}  // namespace tformer::cli
