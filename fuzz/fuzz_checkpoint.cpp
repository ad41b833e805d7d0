// libFuzzer target: the training checkpoint reader, as `tformer train --resume DIR` reads
// DIR/checkpoint.safetensors (cli/train_run.cpp, then train/trainer.h, TrainSession::load_checkpoint):
// __metadata__ "train_state" (its "options" read by TrainOptions::from_json; "step",
// "optimizer_steps", "sampler_state"), "config" (ModelConfig::from_json) and "tokenizer"
// (tokenizer_from_json); then a session of that config and tokenizer restores the weights and the
// AdamW moments (optimizer.m.*, optimizer.v.*) from the file, each tensor checked for its name and
// shape. The run's own settings that size its buffers but are no part of the file's contract are
// set as flags would set them (batch 1, context at most 8, one thread's worth of data built here
// rather than read from --data); a config whose three copies of the weights cannot fit in the file
// is skipped before the session allocates them (the resume path allocates the model before it
// reads the tensors, so such a file is refused only after that allocation).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_util.h"
#include "io/safetensors.h"
#include "model/params.h"
#include "train/trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tformer::fuzz::input_file(data, size, "safetensors");
  tformer::fuzz::expect_clean([&] {
    const tformer::SafetensorsFile f = tformer::SafetensorsFile::open(path);
    const auto& meta = f.metadata();
    for (const char* key : {"train_state", "config", "tokenizer"})
      if (!meta.contains(key)) tformer::fail_file(key, "{}: no \"{}\" in __metadata__", path, key);
    const nlohmann::json state = f.metadata_json("train_state", "");
    if (!state.is_object() || !state.contains("options"))
      tformer::fail_file("train_state", "{}: train_state has no options", path);
    tformer::TrainOptions o = tformer::TrainOptions::from_json(state["options"], path + ": train_state options");
    const tformer::ModelConfig config = tformer::ModelConfig::from_json(f.metadata_json("config", ""), path);
    auto tok = tformer::tokenizer_from_json(f.metadata_json("tokenizer", ""));
    tformer::ModelConfig checked = config;
    checked.validate();
    if (3 * tformer::float32_param_bytes(checked) > static_cast<double>(f.file_size())) return;
    o.batch = 1;
    o.grad_accum = 1;
    o.context = std::min<int64_t>(8, checked.context_length);
    o.val_data.clear();
    o.val_fraction = 0;
    o.threads = 1;
    std::vector<tformer::TokenId> ids;
    for (int64_t i = 0; i < 2 * (o.context + 1); ++i)
      ids.push_back(static_cast<tformer::TokenId>(i % std::max<int64_t>(1, tok->vocab_size())));
    tformer::Dataset d;
    d.train = tformer::TokenArray(std::move(ids));
    tformer::TrainSession session(o, config, std::move(tok), std::move(d));
    session.load_checkpoint(path);
  });
  return 0;
}
