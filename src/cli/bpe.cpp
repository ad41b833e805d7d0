// tformer bpe learn / tformer bpe apply: Sennrich character BPE, identical to subword-nmt 0.3.9.
//
//   tformer bpe learn --input corpus.txt --merges 10000 --output corpus.codes [--min-frequency 2] [--trace]
//                     [--tokenizer-output tok.json]
//   tformer bpe apply --codes corpus.codes [--input text.txt] [--output text.bpe] [--merges N]
//
// Learning reads its inputs as subword-nmt reads an --input file; applying reads an --input file
// the same way and standard input the way apply_bpe.py reads sys.stdin (\r\n and \r become \n).
// Both stream their input in blocks: learning holds the distinct words, applying the current block
// and the longest word, so a 100 MB line without a newline is fine. --tokenizer-output also writes
// the merges as a "bpe" tokenizer JSON whose alphabet is every character of the corpus
// (sennrich_tokenizer.h), for `tformer tokenize --tokenizer tok.json` and training.
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/utf8.h"
#include "tokenizer/sennrich_bpe.h"
#include "tokenizer/sennrich_tokenizer.h"

namespace tformer::cli {

namespace {

struct LearnArgs {
  std::vector<std::string> inputs;
  int64_t merges = 0;
  int64_t min_frequency = 2;
  bool trace = false;
  std::string output;
  std::string tokenizer_output;
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
      fmt::print(stderr, "step {}: {} + {} -> {} (count {}, vocab {})\n", s.step, s.first, s.second, s.symbol, s.count,
                 s.vocab_size);
    };
  }
  const std::vector<BpeWordCount> words = bpe_count_words_in_files(a.inputs);
  const BpeLearnResult result = learn_bpe_from_word_counts(words, options);
  if (a.trace)
    fmt::print(stderr, "learned {} merges; vocabulary {} symbols before the first merge\n", result.merges.size(),
               result.initial_vocab_size);
  if (!result.stop_reason.empty()) fmt::print(stderr, "{}\n", result.stop_reason);
  const std::string codes = format_bpe_codes(result.merges);
  if (a.output == "-") {
    std::fwrite(codes.data(), 1, codes.size(), stdout);
    std::fflush(stdout);
  } else {
    write_file_atomic(a.output, codes);
  }
  if (!a.tokenizer_output.empty()) {
    std::set<std::string> chars;
    for (const BpeWordCount& w : words)
      for (size_t i = 0; i < w.word.size();) {
        const size_t start = i;
        i += utf8_sequence_length(static_cast<unsigned char>(w.word[i]));
        chars.emplace(w.word.substr(start, i - start));
      }
    const SennrichTokenizer tok =
        SennrichTokenizer::from_merges(result.merges, std::vector<std::string>(chars.begin(), chars.end()));
    save_tokenizer_file(tok, a.tokenizer_output);
    fmt::print(stderr, "bpe learn: tokenizer with {} ids ({} characters, {} merges) written to {}\n", tok.vocab_size(),
               chars.size(), result.merges.size(), a.tokenizer_output);
  }
}

// Writes to standard output ("-"), or to a file atomically (core/file_io.h): the file appears
// only once close() succeeds, and an error on the way leaves no trace of it.
class OutputSink {
 public:
  explicit OutputSink(const std::string& path) {
    if (path != "-") file_ = std::make_unique<AtomicFile>(path);
  }
  void write(std::string_view bytes) {
    if (file_) {
      file_->write(bytes);
    } else if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size()) {
      fail_file("<stdout>", "<stdout>: write error: {}", std::strerror(errno));
    }
  }
  void close() {
    if (file_) {
      file_->commit();
    } else if (std::fflush(stdout) != 0) {
      fail_file("<stdout>", "<stdout>: write error: {}", std::strerror(errno));
    }
  }

 private:
  std::unique_ptr<AtomicFile> file_;
};

void run_apply(const ApplyArgs& a) {
  const SennrichBpe bpe = SennrichBpe::load(a.codes, a.merges);
  const bool from_stdin = a.input == "-";
  std::FILE* in = from_stdin ? stdin : std::fopen(a.input.c_str(), "rb");
  if (!in) fail_file(a.input, "{}: cannot open for reading: {}", a.input, std::strerror(errno));
  const std::string name = from_stdin ? "<stdin>" : a.input;
  struct Closer {
    std::FILE* f;
    ~Closer() {
      if (f != stdin) std::fclose(f);
    }
  } closer{in};
  OutputSink out(a.output);
  bpe.apply_stream(
      [&](char* buffer, size_t n) {
        const size_t got = std::fread(buffer, 1, n, in);
        if (got < n && std::ferror(in)) fail_file(name, "{}: read error", name);
        return got;
      },
      [&](std::string_view bytes) { out.write(bytes); },
      from_stdin ? text::LineMode::kUniversal : text::LineMode::kSplitlines, name);
  out.close();
}

}  // namespace

void register_bpe(CLI::App& app) {
  auto* bpe = app.add_subcommand("bpe", "Sennrich character BPE (subword-nmt compatible): learn, apply");
  bpe->require_subcommand(1);

  auto learn_args = std::make_shared<LearnArgs>();
  auto* learn = bpe->add_subcommand("learn", "Learn BPE merges from text (subword-nmt learn_bpe.py)");
  learn->add_option("--input", learn_args->inputs, "Input text file (UTF-8); repeat for several")->required();
  learn->add_option("--merges", learn_args->merges, "Number of merges to learn")
      ->required()
      ->check(CLI::NonNegativeNumber);
  learn->add_option("--min-frequency", learn_args->min_frequency, "Stop when no pair occurs this often (default 2)")
      ->check(CLI::PositiveNumber);
  learn->add_flag("--trace", learn_args->trace, "Print each merge step to stderr");
  learn->add_option("--output", learn_args->output, "Codes file to write ('-' for stdout)")->required();
  learn->add_option("--tokenizer-output", learn_args->tokenizer_output,
                    "Also write a 'bpe' tokenizer JSON (the merges plus every character of the corpus)");
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
