// tformer tokenize / detokenize: text <-> token ids with any of the model's tokenizers.
//
//   tformer tokenize --tokenizer gpt2 --text "Hello world"        -> 15496 995
//   tformer tokenize --tokenizer char --input notes.txt
//   tformer detokenize --tokenizer gpt2 --ids "15496 995"          -> Hello world
//
// --tokenizer: "gpt2" (GPT-2's vocabulary, from --gpt2-dir, $TFORMER_GPT2_DIR or where
// scripts/fetch-gpt2-vocab.sh put it), "char" (256 byte ids), "bpe:CODES" (Sennrich BPE from a
// codes file), "byte-bpe:VOCAB" (a trained byte-level vocabulary: its tokenizer JSON, or a folder
// with encoder.json and vocab.bpe), or a saved tokenizer JSON file (tokenizer_by_name).
// Input is read as raw bytes, nothing stripped; ids are printed on one line separated by single
// spaces. Special tokens ("<|endoftext|>") are plain text unless --allow-special is given.
// detokenize writes the raw bytes, nothing added.
//
//   tformer tokenizer train --type byte-bpe --vocab-size 1000 --input corpus.txt --output tok.json
//           [--gpt2-output DIR] [--min-frequency 2] [--verbose]
// trains a byte-level BPE vocabulary (byte_bpe_train.h) and writes it as a tokenizer JSON file
// (byte_bpe.h documents the form), and with --gpt2-output also as DIR/encoder.json + DIR/vocab.bpe.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "cli/token_ids.h"
#include "core/error.h"
#include "core/file_io.h"
#include "model/checkpoint.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/byte_bpe_train.h"
#include "tokenizer/tokenizer.h"

namespace tformer::cli {
namespace {

std::string read_input(const std::string& path) {
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    return std::move(ss).str();
  }
  return read_file(path);
}

void write_raw(const std::string& bytes) {
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size())
    fail_file("<stdout>", "cannot write to standard output");
  std::fflush(stdout);
}

}  // namespace

void register_tokenize(CLI::App& app) {
  struct Options {
    std::string tokenizer, text, input, ids, gpt2_dir;
    bool allow_special = false, jsonl = false;
  };
  auto opt = std::make_shared<Options>();

  auto* tok = app.add_subcommand("tokenize", "Print the token ids of a text, on one line");
  tok->add_option(
         "--tokenizer", opt->tokenizer,
         "gpt2, cl100k_base, o200k_base, char, bpe:CODES, byte-bpe:VOCAB, spm:MODEL, a saved tokenizer JSON file, or a "
         "model .safetensors / .gguf")
      ->required();
  auto* text_opt = tok->add_option("--text", opt->text, "The text to encode");
  auto* input_opt = tok->add_option("--input", opt->input, "A file to encode as raw bytes ('-': standard input)");
  text_opt->excludes(input_opt);
  tok->add_flag("--allow-special", opt->allow_special, "Recognise special tokens such as <|endoftext|>");
  tok->add_flag("--jsonl", opt->jsonl,
                "Many texts: each line of --input is one JSON string; prints one line of ids per text");
  tok->add_option("--gpt2-dir", opt->gpt2_dir, "Folder with GPT-2's encoder.json and vocab.bpe");
  tok->callback([opt, text_opt, input_opt] {
    if (text_opt->count() == 0 && input_opt->count() == 0) fail_input("--text", "tokenize: give --text or --input");
    if (opt->jsonl && text_opt->count()) fail_input("--jsonl", "tokenize: --jsonl reads its texts from --input");
    const auto tokenizer = tokenizer_by_name_or_model(opt->tokenizer, opt->gpt2_dir);
    std::vector<std::string> texts;
    if (!opt->jsonl) {
      texts.push_back(text_opt->count() ? opt->text : read_input(opt->input));
    } else {
      // Every line is read before anything is printed, so a bad line prints nothing but its error.
      const std::string all = read_input(opt->input);
      size_t number = 0;
      for (size_t at = 0; at < all.size();) {
        const size_t end = std::min(all.find('\n', at), all.size());
        ++number;
        const std::string_view line(all.data() + at, end - at);
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_string())
          fail_file(opt->input,
                    "{}: line {} is not one valid JSON string (--jsonl: one JSON string per line, as JSON.stringify "
                    "writes it)",
                    opt->input, number);
        texts.push_back(j.get<std::string>());
        at = end + 1;
      }
    }
    std::string out;
    for (const std::string& text : texts) {
      const std::vector<TokenId> ids = tokenizer->encode(text, opt->allow_special);
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out.push_back(' ');
        out += std::to_string(ids[i]);
      }
      out.push_back('\n');
    }
    write_raw(out);
  });

  auto* detok = app.add_subcommand("detokenize", "Write the text of token ids, as raw bytes");
  detok
      ->add_option("--tokenizer", opt->tokenizer,
                   "gpt2, cl100k_base, o200k_base, char, bpe:CODES, byte-bpe:VOCAB, spm:MODEL, a saved tokenizer JSON "
                   "file, or a "
                   "model .safetensors / .gguf")
      ->required();
  auto* ids_opt = detok->add_option("--ids", opt->ids, "Token ids separated by spaces");
  auto* ids_input = detok->add_option("--input", opt->input, "A file of token ids ('-': standard input)");
  ids_opt->excludes(ids_input);
  detok->add_option("--gpt2-dir", opt->gpt2_dir, "Folder with GPT-2's encoder.json and vocab.bpe");
  detok->callback([opt, ids_opt, ids_input] {
    if (ids_opt->count() == 0 && ids_input->count() == 0) fail_input("--ids", "detokenize: give --ids or --input");
    const auto tokenizer = tokenizer_by_name_or_model(opt->tokenizer, opt->gpt2_dir);
    const std::vector<TokenId> ids =
        ids_opt->count() ? parse_ids(opt->ids, "--ids") : parse_ids(read_input(opt->input), opt->input);
    write_raw(tokenizer->decode(ids));
  });

  struct TrainOptions {
    std::string type = "byte-bpe", pattern = "gpt2", input, output, gpt2_output;
    ByteBpeTrainOptions train;
    bool verbose = false;
  };
  auto topt = std::make_shared<TrainOptions>();
  auto* group = app.add_subcommand("tokenizer", "Tokenizer vocabularies");
  group->require_subcommand(1);
  auto* train = group->add_subcommand("train", "Train a tokenizer vocabulary on a corpus");
  train->add_option("--type", topt->type, "byte-bpe (GPT-2's kind)")->check(CLI::IsMember({"byte-bpe"}));
  train->add_option("--vocab-size", topt->train.vocab_size, "Bytes (256) + merges + <|endoftext|>")->required();
  train->add_option("--input", topt->input, "Corpus file (raw bytes)")->required();
  train->add_option("--output", topt->output, "Tokenizer JSON file to write")->required();
  train->add_option("--gpt2-output", topt->gpt2_output, "Also write encoder.json and vocab.bpe into this folder");
  train->add_option("--min-frequency", topt->train.min_frequency, "Never merge a pair seen fewer times");
  train
      ->add_option("--pattern", topt->pattern,
                   "Pre-tokenizer: gpt2 (default), cl100k or o200k (tiktoken's), llama.cpp-default; kept in the JSON")
      ->check(CLI::IsMember({"gpt2", "cl100k", "o200k", "llama.cpp-default"}));
  train->add_flag("--verbose", topt->verbose, "Print each merge");
  train->callback([topt] {
    if (topt->verbose)
      topt->train.on_merge = [](const ByteBpeMergeStep& m) {
        fmt::print(stderr, "merge {}: {} + {} -> {} '{}' (count {})\n", m.number, m.left, m.right, m.merged,
                   gpt2_bytes_to_unicode(m.bytes), m.count);
      };
    topt->train.pattern = *ByteBpeTokenizer::pattern_of(topt->pattern);
    const std::string corpus = read_input(topt->input);
    const ByteBpeTokenizer tok = train_byte_bpe(corpus, topt->train);
    save_tokenizer_file(tok, topt->output);
    if (!topt->gpt2_output.empty()) {
      std::filesystem::create_directories(topt->gpt2_output);
      tok.save_gpt2((std::filesystem::path(topt->gpt2_output) / "encoder.json").string(),
                    (std::filesystem::path(topt->gpt2_output) / "vocab.bpe").string());
      // GPT-2's two files hold the vocabulary and the merges only: whoever reads them (tformer's
      // byte-bpe:DIR, GPT-2's encoder.py, Hugging Face) splits with GPT-2's pattern.
      if (tok.pattern() != ByteBpeTokenizer::Pattern::Gpt2)
        fmt::print(stderr,
                   "tokenizer train: note: encoder.json and vocab.bpe have no place for the pattern '{}': read "
                   "back from {} they split text with GPT-2's pattern (the JSON file {} keeps '{}')\n",
                   topt->pattern, topt->gpt2_output, topt->output, topt->pattern);
    }
    fmt::print(stderr,
               "tokenizer train: {} merges, vocabulary {} (with <|endoftext|> = {}), pattern {}, written to {}{}\n",
               tok.merges().size(), tok.vocab_size(), tok.vocab_size() - 1, topt->pattern, topt->output,
               topt->gpt2_output.empty() ? "" : " and " + topt->gpt2_output);
    if (static_cast<int64_t>(tok.vocab_size()) < topt->train.vocab_size)
      fmt::print(stderr, "tokenizer train: stopped early: no pair occurs at least {} times\n",
                 topt->train.min_frequency);
  });
}

}  // namespace tformer::cli
