// Each subcommand lives in its own src/cli/<name>.cpp and exposes one register_<name>(app)
// function that adds a CLI11 subcommand whose callback does the work. register_all adds them all.
#pragma once

#include <CLI/CLI.hpp>

namespace tformer::cli {

void register_all(CLI::App& app);

void register_info(CLI::App& app);            // info.cpp
void register_bpe(CLI::App& app);             // bpe.cpp: bpe learn, bpe apply (Sennrich BPE)
void register_tokenize(CLI::App& app);        // tokenize.cpp: tokenize, detokenize, tokenizer train
void register_model_commands(CLI::App& app);  // model_commands.cpp: init, eval
void register_generate(CLI::App& app);        // generate.cpp: generate, logits
void register_plot(CLI::App& app);            // plot.cpp: plot (loss curves as a PNG)
void register_train(CLI::App& app);           // train.cpp: train
void register_convert(CLI::App& app);         // convert.cpp: export (GGUF), import (Hugging Face)
void register_serve(CLI::App& app);           // serve.cpp: serve (the OpenAI-compatible server)

}  // namespace tformer::cli
