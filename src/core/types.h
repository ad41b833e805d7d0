// Vocabulary types shared by every layer (kernels, tokenizers, model, training, generation).
#pragma once

#include <cstdint>

namespace tformer {

// One token of a tokenizer's vocabulary: an index in [0, vocab_size). Signed so that -1 can mean
// "none" and negative sentinels such as the cross-entropy ignore index fit.
using TokenId = int32_t;

}  // namespace tformer
