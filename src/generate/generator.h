// Generation: prefill each prompt through the KV cache, then decode one token per sequence per
// step. A batch of prompts of different lengths is prefilled together (each sequence's padding is
// neither cached nor counted; its positions are its own), so each sequence's result is the one it
// would get alone: same logits up to float rounding, same tokens under the same seed.
//
// Context is counted in tokens: a prompt of P tokens asking for N new ones needs P + N <=
// context_length, otherwise generate() throws an Error naming both numbers. (No sliding window:
// a model never saw positions beyond its training context, so its outputs there are not
// trustworthy.)
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "generate/sampler.h"
#include "model/model.h"

namespace tformer {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplerConfig sampler;
  std::optional<TokenId> stop_token;  // end-of-text: generation of that sequence stops after it
  int64_t prefill_chunk = 0;          // 0 = the whole prompt in one chunk
  // Ids never sampled (their logits are set to -infinity first): those of the model's vocabulary
  // that are no token of its tokenizer (non_token_ids in tokenizer/tokenizer.h).
  std::vector<TokenId> never_sample;
};

struct GenerateStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t kv_cache_bytes = 0;  // payload: 2 x layers x batch x kv_heads x capacity x head_dim x 4
  int64_t kv_capacity = 0;     // token slots per sequence
};

// on_token(sequence, id) is called as each token is produced (for streaming output); it may be
// empty. Returns the generated ids of each sequence (the stop token included when reached).
std::vector<std::vector<TokenId>> generate(Model& model, const std::vector<std::vector<TokenId>>& prompts,
                                           const GenerateOptions& options,
                                           const std::function<void(int64_t, TokenId)>& on_token = {},
                                           GenerateStats* stats = nullptr);

}  // namespace tformer
