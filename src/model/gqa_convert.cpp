#include "model/gqa_convert.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace tformer {

KvPool parse_kv_pool(const std::string& s) {
  if (s == "mean") return KvPool::Mean;
  if (s == "first") return KvPool::First;
  fail_input("--pool", "--pool: unknown pooling '{}' (mean | first)", s);
}

const char* to_string(KvPool p) { return p == KvPool::Mean ? "mean" : "first"; }

std::unique_ptr<Model> convert_kv_heads(Model& source, int64_t kv_heads, KvPool pool) {
  const ModelConfig& c = source.config();
  if (kv_heads < 1 || kv_heads > c.n_kv_heads || c.n_kv_heads % kv_heads != 0)
    fail_input("--kv-heads",
               "--kv-heads {}: must divide the model's {} key/value heads (n_heads {}, n_kv_heads {}): each new "
               "head pools a whole group of them",
               kv_heads, c.n_kv_heads, c.n_heads, c.n_kv_heads);
  ModelConfig t = c;
  t.n_kv_heads = kv_heads;
  t.validate();
  auto out = std::make_unique<Model>(t);
  auto& from = source.params();
  auto& to = out->params();
  const int64_t hd = c.head_dim(), group = c.n_kv_heads / kv_heads;
  for (const auto& e : to.entries()) {
    const auto* s = from.find(e.name);
    TF_CHECK(s != nullptr, "convert: the source model has no tensor '{}'", e.name);
    const float* src = from.data() + s->offset;
    float* dst = to.data() + e.offset;
    const bool kv = e.name.ends_with(".attn.wk.weight") || e.name.ends_with(".attn.wk.bias") ||
                    e.name.ends_with(".attn.wv.weight") || e.name.ends_with(".attn.wv.bias");
    if (!kv) {
      TF_CHECK(s->shape.numel() == e.shape.numel(), "convert: tensor '{}' changes size", e.name);
      std::memcpy(dst, src, static_cast<size_t>(e.shape.numel()) * sizeof(float));
      continue;
    }
    // [n_kv * hd, cols] -> [K * hd, cols]: row r of new head j from row r of heads j*g .. j*g+g-1.
    const int64_t cols = e.shape.numel() / (kv_heads * hd);
    for (int64_t j = 0; j < kv_heads; ++j)
      for (int64_t r = 0; r < hd; ++r) {
        float* row = dst + (j * hd + r) * cols;
        const int64_t members = pool == KvPool::Mean ? group : 1;
        std::vector<double> sum(static_cast<size_t>(cols), 0.0);
        for (int64_t m = 0; m < members; ++m) {
          const float* in = src + ((j * group + m) * hd + r) * cols;
          for (int64_t k = 0; k < cols; ++k) sum[static_cast<size_t>(k)] += in[k];
        }
        for (int64_t k = 0; k < cols; ++k)
          row[k] = static_cast<float>(sum[static_cast<size_t>(k)] / static_cast<double>(members));
      }
  }
  return out;
}

}  // namespace tformer
