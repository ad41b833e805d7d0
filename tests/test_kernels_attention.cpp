// The reference attention kernel (kernels/attention.h), the rest: MHA against one call per head;
// the op table: GQA/MQA against MHA with repeated K/V (forward and backward), float against
// double, gradients against central finite differences in double; accumulation, threads, memory
// layouts and argument checks. The three causal checks and hand cases: test_kernels_attention_checks.cpp;
// the masks: test_kernels_attention_mask.cpp. Layouts: attention_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "attention_test_util.h"
#include "core/error.h"
#include "core/threads.h"
#include "kernels/attention.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;
using test::any_nan;
using test::as;
using test::backward;
using test::forward;
using test::Forward;
using test::Grads;
using test::kNaN;
using test::kv_index;
using test::kv_size;
using test::MaskData;
using test::p_index;
using test::p_size;
using test::q_index;
using test::q_size;
using test::random_values;
using test::rows_of;
using test::SymmetricExample;
using test::zero_grads;

// ---------------------------------------------------------------------------------------------
// 1. Heads (GQA and MQA against repeated MHA: the op table below).

// MHA (n_kv_heads = n_heads) equals one single-head call per head, made through views that pick
// that head out of the same arrays: the head indexing is right. Identical arithmetic: exact.
TEST(AttentionGqa, MhaEqualsOneSingleHeadCallPerHead) {
  const AttentionShape s{.batch = 2, .n_q = 5, .n_kv = 5, .n_heads = 3, .n_kv_heads = 3, .head_dim = 4};
  const auto q = random_values(q_size(s), 101), k = random_values(kv_size(s), 102), v = random_values(kv_size(s), 103);
  MaskData md;
  md.key_valid = {1, 0, 1, 1, 1, /**/ 1, 1, 1, 0, 1};
  const auto f = forward<double>(s, md.get(s), q, k, v);
  const int64_t hd = 4, H = 3;
  for (int64_t h = 0; h < H; ++h) {
    AttentionShape one = s;
    one.n_heads = one.n_kv_heads = 1;
    auto view = [&](const std::vector<double>& x) {
      return HeadsView<const double>{x.data() + h * hd, 5 * H * hd, H * hd, hd};
    };
    const auto fh = forward<double>(one, md.get(one), view(q), view(k), view(v));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t d = 0; d < hd; ++d)
          EXPECT_EQ(fh.out[q_index(one, b, i, 0, d)], f.out[q_index(s, b, i, h, d)]) << "h=" << h;
  }
}

// ---------------------------------------------------------------------------------------------
// 2. The backward accumulates (the gradients against finite differences: the op table below).

// Two backward calls accumulate: twice the gradient of one.
TEST(AttentionGrad, BackwardAccumulates) {
  const AttentionShape s{.batch = 1, .n_q = 4, .n_kv = 4, .n_heads = 2, .n_kv_heads = 1, .head_dim = 3};
  MaskData md;
  const auto q = random_values(q_size(s), 151), k = random_values(kv_size(s), 152), v = random_values(kv_size(s), 153),
             dout = random_values(q_size(s), 154);
  const auto f = forward<double>(s, md.get(s), q, k, v);
  auto once = zero_grads<double>(s), twice = zero_grads<double>(s);
  backward<double>(s, md.get(s), q, k, v, f.probs, dout, once);
  backward<double>(s, md.get(s), q, k, v, f.probs, dout, twice);
  backward<double>(s, md.get(s), q, k, v, f.probs, dout, twice);
  for (auto& x : once.dq) x *= 2;
  for (auto& x : once.dk) x *= 2;
  for (auto& x : once.dv) x *= 2;
  EXPECT_TRUE(all_close(twice.dq, once.dq, 1e-15, 0));
  EXPECT_TRUE(all_close(twice.dk, once.dk, 1e-15, 0));
  EXPECT_TRUE(all_close(twice.dv, once.dv, 1e-15, 0));
}

// ---------------------------------------------------------------------------------------------
// 3. Threads and layouts (float against double: the op table below).

TEST(AttentionNumerics, IdenticalWithOneAndTwoThreads) {
  const AttentionShape s{.batch = 2, .n_q = 48, .n_kv = 48, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16};
  MaskData md;
  const auto q = as<float>(random_values(q_size(s), 171)), k = as<float>(random_values(kv_size(s), 172)),
             v = as<float>(random_values(kv_size(s), 173)), dout = as<float>(random_values(q_size(s), 174));
  std::vector<Forward<float>> fwd;
  std::vector<Grads<float>> grads;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    fwd.push_back(forward<float>(s, md.get(s), q, k, v));
    grads.push_back(zero_grads<float>(s));
    backward<float>(s, md.get(s), q, k, v, fwd.back().probs, dout, grads.back());
  }
  set_num_threads(0);
  EXPECT_EQ(fwd[0].out, fwd[1].out);
  EXPECT_EQ(fwd[0].probs, fwd[1].probs);
  EXPECT_EQ(grads[0].dq, grads[1].dq);
  EXPECT_EQ(grads[0].dk, grads[1].dk);
  EXPECT_EQ(grads[0].dv, grads[1].dv);
}

// Keys and values stored [B, T, H, hd] (projections) and [B, H, T, hd] (the cache): identical
// outputs and identical gradients (same arithmetic, different addresses).
TEST(AttentionNumerics, StridedKvLayoutsGiveIdenticalResults) {
  const int64_t B = 2, T = 5, KVH = 2, H = 4, hd = 3;
  const AttentionShape s{.batch = B, .n_q = T, .n_kv = T, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
  MaskData md;
  md.q_offset = {0, 0};
  const auto q = random_values(q_size(s), 181), k = random_values(kv_size(s), 182), v = random_values(kv_size(s), 183),
             dout = random_values(q_size(s), 184);
  std::vector<double> kt(k.size()), vt(v.size());  // [B, KVH, T, hd]
  auto t_index = [&](int64_t b, int64_t j, int64_t g, int64_t d) { return ((b * KVH + g) * T + j) * hd + d; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < T; ++j)
      for (int64_t g = 0; g < KVH; ++g)
        for (int64_t d = 0; d < hd; ++d) {
          kt[t_index(b, j, g, d)] = k[kv_index(s, b, j, g, d)];
          vt[t_index(b, j, g, d)] = v[kv_index(s, b, j, g, d)];
        }
  const auto a = forward<double>(s, md.get(s), q, k, v);
  const auto qv = heads_btHd(q.data(), T, H, hd);
  const auto kv = heads_bHTd(kt.data(), T, KVH, hd), vv = heads_bHTd(vt.data(), T, KVH, hd);
  const auto bt = forward<double>(s, md.get(s), qv, kv, vv);
  EXPECT_EQ(a.out, bt.out);
  EXPECT_EQ(a.probs, bt.probs);

  auto ga = zero_grads<double>(s);
  backward<double>(s, md.get(s), q, k, v, a.probs, dout, ga);
  std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
  attention_backward<double>(heads_btHd(dq.data(), T, H, hd), heads_bHTd(dk.data(), T, KVH, hd),
                             heads_bHTd(dv.data(), T, KVH, hd), heads_btHd(dout.data(), T, H, hd), bt.probs.data(), qv,
                             kv, vv, s, md.get(s));
  EXPECT_EQ(dq, ga.dq);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < T; ++j)
      for (int64_t g = 0; g < KVH; ++g)
        for (int64_t d = 0; d < hd; ++d) {
          EXPECT_EQ(dk[t_index(b, j, g, d)], ga.dk[kv_index(s, b, j, g, d)]);
          EXPECT_EQ(dv[t_index(b, j, g, d)], ga.dv[kv_index(s, b, j, g, d)]);
        }
}

// ---------------------------------------------------------------------------------------------
// 4. The op table.
//
// GQA/MQA against MHA whose K/V heads are materialised repeated (head h gets kv head h / group):
// the same arithmetic in another order, to 1e-14 on outputs and weights and 1e-13 on gradients
// (the GQA dK/dV are the group sums of the repeated-MHA dK/dV). Float against double: inputs
// rounded to float (relative 6e-8), internal sums in double: output errors ~1e-7, held to 1e-5
// relative (1e-6 absolute on outputs, 1e-7 on weights), gradients to 1e-4 and 1e-5. Gradients of
// the double kernel against central differences of loss = sum(r * out): 1e-6.
const test::OpBounds kGqa{"attention GQA vs repeated MHA",
                          {{"out", {.atol = 1e-14}},
                           {"probs", {.atol = 1e-14}},
                           {"dq", {.atol = 1e-13}},
                           {"dk", {.atol = 1e-13}},
                           {"dv", {.atol = 1e-13}}}};
const test::OpBounds kAttention{"attention",
                                {{"out", {.rtol = 1e-5, .atol = 1e-6}},
                                 {"probs", {.rtol = 1e-5, .atol = 1e-7}},
                                 {"dq", {.rtol = 1e-4, .atol = 1e-5}},
                                 {"dk", {.rtol = 1e-4, .atol = 1e-5}},
                                 {"dv", {.rtol = 1e-4, .atol = 1e-5}}},
                                1e-6};

test::Layout q_layout(const AttentionShape& s) {
  return {{{"b", s.batch}, {"i", s.n_q}, {"h", s.n_heads}, {"e", s.head_dim}}};
}
test::Layout kv_layout(const AttentionShape& s) {
  return {{{"b", s.batch}, {"j", s.n_kv}, {"g", s.n_kv_heads}, {"e", s.head_dim}}};
}
test::Layout p_layout(const AttentionShape& s) {
  return {{{"b", s.batch}, {"h", s.n_heads}, {"i", s.n_q}, {"j", s.n_kv}}};
}

std::string describe(const AttentionShape& s, const MaskData& md) {
  std::ostringstream os;
  os << "B=" << s.batch << " n_q=" << s.n_q << " n_kv=" << s.n_kv << " H=" << s.n_heads << " KVH=" << s.n_kv_heads
     << " hd=" << s.head_dim << (md.causal ? " causal" : " full");
  if (!md.q_offset.empty()) os << " offsets";
  if (!md.kv_len.empty()) os << " kv_len";
  if (!md.key_valid.empty()) os << " padded";
  return os.str();
}

// With causal mask, offsets, kv_len and padding in the mix.
test::OpCase gqa_vs_repeated_mha(int64_t KVH) {
  const int64_t H = 6, hd = 3, n_q = 4, n_kv = 7;
  const AttentionShape s{.batch = 2, .n_q = n_q, .n_kv = n_kv, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
  MaskData md;
  md.q_offset = {3, 1};
  md.kv_len = {7, 6};
  md.key_valid = {1, 1, 0, 1, 1, 1, 1, /**/ 1, 1, 1, 1, 0, 1, 1};
  return test::compare_case(kGqa, describe(s, md), [=] {
    const int64_t group = H / KVH;
    AttentionShape rep = s;
    rep.n_kv_heads = H;
    const auto q = random_values(q_size(s), 111), k = random_values(kv_size(s), 112 + KVH),
               v = random_values(kv_size(s), 120 + KVH), dout = random_values(q_size(s), 130);
    std::vector<double> kr(kv_size(rep)), vr(kv_size(rep));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < n_kv; ++j)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < hd; ++d) {
            kr[kv_index(rep, b, j, h, d)] = k[kv_index(s, b, j, h / group, d)];
            vr[kv_index(rep, b, j, h, d)] = v[kv_index(s, b, j, h / group, d)];
          }
    const auto fg = forward<double>(s, md.get(s), q, k, v);
    const auto fr = forward<double>(rep, md.get(rep), q, kr, vr);
    auto gg = zero_grads<double>(s);
    auto gr = zero_grads<double>(rep);
    backward<double>(s, md.get(s), q, k, v, fg.probs, dout, gg);
    backward<double>(rep, md.get(rep), q, kr, vr, fr.probs, dout, gr);
    std::vector<double> dk_sum(kv_size(s), 0.0), dv_sum(kv_size(s), 0.0);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < n_kv; ++j)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < hd; ++d) {
            dk_sum[kv_index(s, b, j, h / group, d)] += gr.dk[kv_index(rep, b, j, h, d)];
            dv_sum[kv_index(s, b, j, h / group, d)] += gr.dv[kv_index(rep, b, j, h, d)];
          }
    return std::vector<test::Compared>{test::compared("out", fg.out, fr.out, q_layout(s)),
                                       test::compared("probs", fg.probs, fr.probs, p_layout(s)),
                                       test::compared("dq", gg.dq, gr.dq, q_layout(s)),
                                       test::compared("dk", gg.dk, dk_sum, kv_layout(s), "group sums"),
                                       test::compared("dv", gg.dv, dv_sum, kv_layout(s), "group sums")};
  });
}

// The float kernel against the double kernel on the same inputs (rounded to float).
test::OpCase float_vs_double(const AttentionShape& s, const MaskData& md, uint64_t seed) {
  return test::compare_case(kAttention, "float vs double " + describe(s, md), [=] {
    const auto q = random_values(q_size(s), seed), k = random_values(kv_size(s), seed + 1),
               v = random_values(kv_size(s), seed + 2), dout = random_values(q_size(s), seed + 3);
    const auto fd = forward<double>(s, md.get(s), q, k, v);
    const auto ff = forward<float>(s, md.get(s), as<float>(q), as<float>(k), as<float>(v));
    auto gd = zero_grads<double>(s);
    auto gf = zero_grads<float>(s);
    backward<double>(s, md.get(s), q, k, v, fd.probs, dout, gd);
    backward<float>(s, md.get(s), as<float>(q), as<float>(k), as<float>(v), ff.probs, as<float>(dout), gf);
    return std::vector<test::Compared>{
        test::compared("out", ff.out, fd.out, q_layout(s)), test::compared("probs", ff.probs, fd.probs, p_layout(s)),
        test::compared("dq", gf.dq, gd.dq, q_layout(s)), test::compared("dk", gf.dk, gd.dk, kv_layout(s)),
        test::compared("dv", gf.dv, gd.dv, kv_layout(s))};
  });
}

// loss = sum(r * out) for q, k and v. The gradients start non-zero: backward must add to them.
// `structural` checks the exact zeros the mask implies (the fixed offsets already removed).
using Structural = std::function<void(const Grads<double>&, const Forward<double>&, const std::vector<double>& q,
                                      const std::vector<double>& k, const std::vector<double>& v)>;
test::OpCase finite_differences(const AttentionShape& s, const MaskData& md, uint64_t seed, std::array<double, 3> start,
                                const Structural& structural) {
  return test::gradient_case(kAttention, "finite differences " + describe(s, md), [=] {
    const AttentionMask m = md.get(s);
    const std::vector<double> q = random_values(q_size(s), seed), k = random_values(kv_size(s), seed + 1),
                              v = random_values(kv_size(s), seed + 2), r = random_values(q_size(s), seed + 3);
    // The mask points into md's arrays: the loss keeps its own copy of them.
    auto loss = [s, md, r](const std::vector<std::vector<double>>& in) {
      const auto f = forward<double>(s, md.get(s), in[0], in[1], in[2]);
      double sum = 0;
      for (int64_t i = 0; i < q_size(s); ++i) sum += r[i] * f.out[i];
      return sum;
    };
    const auto f = forward<double>(s, m, q, k, v);
    const double s0 = start[0], s1 = start[1], s2 = start[2];
    Grads<double> g{std::vector<double>(q_size(s), s0), std::vector<double>(kv_size(s), s1),
                    std::vector<double>(kv_size(s), s2)};
    backward<double>(s, m, q, k, v, f.probs, r, g);
    for (auto& x : g.dq) x -= s0;
    for (auto& x : g.dk) x -= s1;
    for (auto& x : g.dv) x -= s2;
    if (structural) structural(g, f, q, k, v);
    return test::GradientCheck{
        {{"q", q, g.dq, q_layout(s)}, {"k", k, g.dk, kv_layout(s)}, {"v", v, g.dv, kv_layout(s)}}, loss};
  });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  for (int64_t KVH : {1, 2, 3, 6}) cases.push_back(gqa_vs_repeated_mha(KVH));
  {
    const AttentionShape s{.batch = 2, .n_q = 16, .n_kv = 16, .n_heads = 4, .n_kv_heads = 2, .head_dim = 8};
    MaskData md;
    md.q_offset = {0, 0};
    md.key_valid.assign(32, 1);
    md.key_valid[16 + 5] = 0;
    cases.push_back(float_vs_double(s, md, 161));
  }
  {
    const AttentionShape s{.batch = 1, .n_q = 1, .n_kv = 1, .n_heads = 1, .n_kv_heads = 1, .head_dim = 1};
    cases.push_back(float_vs_double(s, MaskData{}, 165));
  }
  {
    const AttentionShape s{.batch = 3, .n_q = 5, .n_kv = 33, .n_heads = 6, .n_kv_heads = 3, .head_dim = 5};
    MaskData md;
    md.q_offset = {28, 10, 0};
    md.kv_len = {33, 15, 5};
    cases.push_back(float_vs_double(s, md, 166));
  }
  {
    // Causal mask, per-sequence offsets, kv_len, padding, GQA, and one fully masked row (seq 1,
    // row 0: offset 1 allows slots 0 and 1, both padding). Structural zeros: the fully masked row,
    // and keys no row may read (seq 0: slot 3 is padding, slot 5 is past kv_len).
    const AttentionShape s{.batch = 2, .n_q = 3, .n_kv = 6, .n_heads = 4, .n_kv_heads = 2, .head_dim = 3};
    MaskData md;
    md.q_offset = {2, 1};
    md.kv_len = {5, 6};
    md.key_valid = {1, 1, 1, 0, 1, 1, /**/ 0, 0, 1, 1, 1, 1};
    cases.push_back(finite_differences(s, md, 141, {0.25, -0.5, 1.0},
                                       [s](const Grads<double>& g, const Forward<double>&, const std::vector<double>&,
                                           const std::vector<double>&, const std::vector<double>&) {
                                         for (int64_t h = 0; h < 4; ++h)
                                           for (int64_t d = 0; d < 3; ++d) EXPECT_EQ(g.dq[q_index(s, 1, 0, h, d)], 0.0);
                                         for (int64_t j : {3, 5})
                                           for (int64_t kh = 0; kh < 2; ++kh)
                                             for (int64_t d = 0; d < 3; ++d) {
                                               EXPECT_EQ(g.dk[kv_index(s, 0, j, kh, d)], 0.0);
                                               EXPECT_EQ(g.dv[kv_index(s, 0, j, kh, d)], 0.0);
                                             }
                                       }));
  }
  {
    // Non-causal (bidirectional) attention with padding: every row reads every valid key, later
    // keys included. Batch 2 with padding in different places (seq 1's first slot, seq 0's last
    // two), kv_len on seq 1, n_q != n_kv, GQA. Row 0 of each sequence puts positive weight on a
    // LATER key (seq 0: slot 2; seq 1: slots 2, 3), and every row's weights cover exactly the valid
    // slots. Structural zeros: padded slots (seq 0: 3, 4; seq 1: 0) and seq 1's slot past kv_len (4
    // is both valid-flagged and past kv_len = 4) get no gradient. The same data with causal = true
    // is a different function (rows 0 and 1 lose their later keys).
    const AttentionShape s{.batch = 2, .n_q = 3, .n_kv = 5, .n_heads = 4, .n_kv_heads = 2, .head_dim = 3};
    MaskData md;
    md.causal = false;
    md.kv_len = {5, 4};
    md.key_valid = {1, 1, 1, 0, 0, /**/ 0, 1, 1, 1, 1};
    cases.push_back(
        finite_differences(s, md, 241, {-0.25, 0.5, 2.0},
                           [s, md](const Grads<double>& g, const Forward<double>& f, const std::vector<double>& q,
                                   const std::vector<double>& k, const std::vector<double>& v) {
                             for (int64_t b = 0; b < 2; ++b)
                               for (int64_t h = 0; h < 4; ++h)
                                 for (int64_t i = 0; i < 3; ++i)
                                   for (int64_t j = 0; j < 5; ++j) {
                                     const bool valid = md.key_valid[b * 5 + j] != 0 && j < md.kv_len[b];
                                     if (valid) {
                                       EXPECT_GT(f.probs[p_index(s, b, h, i, j)], 0.0)
                                           << "b=" << b << " h=" << h << " i=" << i << " j=" << j;
                                     } else {
                                       EXPECT_EQ(f.probs[p_index(s, b, h, i, j)], 0.0)
                                           << "b=" << b << " h=" << h << " i=" << i << " j=" << j;
                                     }
                                   }
                             for (auto [b, j] : {std::pair<int64_t, int64_t>{0, 3}, {0, 4}, {1, 0}, {1, 4}})
                               for (int64_t kh = 0; kh < 2; ++kh)
                                 for (int64_t d = 0; d < 3; ++d) {
                                   EXPECT_EQ(g.dk[kv_index(s, b, j, kh, d)], 0.0) << "b=" << b << " j=" << j;
                                   EXPECT_EQ(g.dv[kv_index(s, b, j, kh, d)], 0.0) << "b=" << b << " j=" << j;
                                 }
                             MaskData causal = md;
                             causal.causal = true;
                             EXPECT_FALSE(all_close(forward<double>(s, causal.get(s), q, k, v).out, f.out, 0, 1e-3));
                           }));
  }
  {
    // MQA, one sequence at an offset.
    const AttentionShape s{.batch = 1, .n_q = 2, .n_kv = 5, .n_heads = 2, .n_kv_heads = 1, .head_dim = 2};
    MaskData md;
    md.q_offset = {3};
    cases.push_back(finite_differences(s, md, 251, {0.5, 0.5, -1.0}, nullptr));
  }
  return cases;
}

class AttentionOps : public test::OpCaseTest {};
TEST_P(AttentionOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, AttentionOps, ::testing::ValuesIn(op_cases()), test::case_name);

// ---------------------------------------------------------------------------------------------
// 5. Argument checks.

TEST(AttentionValidate, RejectsBadShapesAndMasks) {
  const AttentionShape ok{.batch = 2, .n_q = 3, .n_kv = 4, .n_heads = 6, .n_kv_heads = 2, .head_dim = 8};
  AttentionMask m;
  EXPECT_NO_THROW(validate(ok, m));
  for (int64_t kvh : {4, 5, 7}) {
    AttentionShape s = ok;
    s.n_kv_heads = kvh;
    EXPECT_ERROR(validate(s, m), ErrorKind::Internal, "") << "n_kv_heads " << kvh;
  }
  for (int field = 0; field < 6; ++field)
    for (int64_t bad : {0, -1}) {
      AttentionShape s = ok;
      int64_t* f[] = {&s.batch, &s.n_q, &s.n_kv, &s.n_heads, &s.n_kv_heads, &s.head_dim};
      *f[field] = bad;
      EXPECT_ERROR(validate(s, m), ErrorKind::Internal, "") << "field " << field << " = " << bad;
    }
  const std::vector<uint8_t> valid(2 * 4, 1);
  m.key_valid = valid.data();
  m.n_kv = 3;  // wrong stride
  EXPECT_ERROR(validate(ok, m), ErrorKind::Internal, "");
  m.n_kv = 4;
  EXPECT_NO_THROW(validate(ok, m));
  const std::vector<int64_t> neg_offset{0, -1}, long_kv{4, 5};
  AttentionMask m2;
  m2.q_offset = neg_offset.data();
  EXPECT_ERROR(validate(ok, m2), ErrorKind::Internal, "");
  AttentionMask m3;
  m3.kv_len = long_kv.data();
  EXPECT_ERROR(validate(ok, m3), ErrorKind::Internal, "");
  // The kernels check too.
  AttentionShape bad = ok;
  bad.n_kv_heads = 4;
  std::vector<double> x(1024);
  const auto view = heads_btHd(x.data(), 4, 6, 8);
  EXPECT_ERROR(attention_forward<double>(view, x.data(), view, view, view, bad, AttentionMask{}), ErrorKind::Internal,
               "");
  EXPECT_ERROR(attention_backward<double>(view, view, view, view, x.data(), view, view, view, bad, AttentionMask{}),
               ErrorKind::Internal, "");
}

}  // namespace
}  // namespace tformer