// Dropout on the attention probabilities (training), in both kernels, through the op table: the
// tiled kernel and the reference one, in double, each against the definition written out here
// with every P materialised; both make the same keep/drop decision for the same key. The cases
// and their data: flash_attention_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "flash_attention_test_util.h"
#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::Case;
using test::Data;
using test::describe;
using test::make_data;

// Against the definition in double: 1e-12 on the output, 1e-11 on the gradients (relative; 1e-14
// and 1e-13 absolute), the two sides summing in different orders.
const std::map<std::string, test::Bound> kDropoutBounds{{"out", {.rtol = 1e-12, .atol = 1e-14}},
                                                        {"dq", {.rtol = 1e-11, .atol = 1e-13}},
                                                        {"dk", {.rtol = 1e-11, .atol = 1e-13}},
                                                        {"dv", {.rtol = 1e-11, .atol = 1e-13}}};
const test::OpBounds kFlashDropout{"flash_attention<double> dropout", kDropoutBounds};
const test::OpBounds kReferenceDropout{"attention<double> dropout", kDropoutBounds};

// Dropout on the probabilities (training): the kernel, in double, against the definition written
// out here with every P materialised: P'_ij = P_ij * M_ij / (1 - p), out_i = sum_j P'_ij v_j;
// dv_j = sum_i P'_ij dout_i, dP_ij = (dout_i . v_j) M_ij / (1 - p), D_i = sum_j P_ij dP_ij,
// dS_ij = P_ij (dP_ij - D_i), dq_i = sum_j dS_ij k_j / sqrt(hd), dk_j = sum_i dS_ij q_i / sqrt(hd),
// with M from dropout_kept at index ((b H + h) n_q + i) n_kv + j. Causal and not, GQA, sizes
// across several blocks and a one-row case (which takes the general path, not decode).
test::OpCase dropout_case(const Case& c, bool tiled) {
  return test::compare_case(tiled ? kFlashDropout : kReferenceDropout, describe(c), [c, tiled] {
    const double p = 0.3;
    const AttentionDropout drop{0x1234abcdULL + static_cast<uint64_t>(c.n_q), dropout_threshold(p), 1.0 / (1.0 - p)};
    const Data<double> d = make_data<double>(c);
    const AttentionShape s = c.shape();
    const AttentionMask m = c.mask();
    const int64_t hd = s.head_dim, H = s.n_heads, group = H / s.n_kv_heads;
    std::vector<double> out(d.q.size(), -7.0), lse(static_cast<size_t>(s.batch * H * s.n_q), -7.0);
    std::vector<double> dq = d.dq0, dk = d.dk0, dv = d.dv0;
    if (tiled) {
      flash_attention_forward<double>(heads_btHd(out.data(), s.n_q, H, hd), lse.data(), d.qv, d.kv, d.vv, s, m, drop);
      flash_attention_backward<double>(
          heads_btHd(dq.data(), s.n_q, H, hd), heads_btHd(dk.data(), s.n_kv, s.n_kv_heads, hd),
          heads_btHd(dv.data(), s.n_kv, s.n_kv_heads, hd), d.doutv, heads_btHd<const double>(out.data(), s.n_q, H, hd),
          lse.data(), d.qv, d.kv, d.vv, s, m, drop);
    } else {
      std::vector<double> probs(static_cast<size_t>(s.batch * H * s.n_q * s.n_kv), -7.0);
      attention_forward<double>(heads_btHd(out.data(), s.n_q, H, hd), probs.data(), d.qv, d.kv, d.vv, s, m, drop);
      attention_backward<double>(heads_btHd(dq.data(), s.n_q, H, hd), heads_btHd(dk.data(), s.n_kv, s.n_kv_heads, hd),
                                 heads_btHd(dv.data(), s.n_kv, s.n_kv_heads, hd), d.doutv, probs.data(), d.qv, d.kv,
                                 d.vv, s, m, drop);
    }

    std::vector<double> want_out(d.q.size(), 0.0), wdq = d.dq0, wdk = d.dk0, wdv = d.dv0;
    auto wq = heads_btHd(wdq.data(), s.n_q, H, hd);
    auto wk = heads_btHd(wdk.data(), s.n_kv, s.n_kv_heads, hd);
    auto wv = heads_btHd(wdv.data(), s.n_kv, s.n_kv_heads, hd);
    auto wo = heads_btHd(want_out.data(), s.n_q, H, hd);
    const double sm = 1.0 / std::sqrt(static_cast<double>(hd));
    int64_t kept = 0, seen = 0;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < s.n_q; ++i) {
          const int64_t g = h / group;
          std::vector<double> P(static_cast<size_t>(s.n_kv), 0.0), M(static_cast<size_t>(s.n_kv), 0.0);
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < s.n_kv; ++j) {
            if (!m.allowed(b, i, j)) continue;
            double acc = 0;
            for (int64_t e = 0; e < hd; ++e) acc += d.qv.at(b, i, h)[e] * d.kv.at(b, j, g)[e];
            P[j] = acc * sm;
            mx = std::max(mx, P[j]);
          }
          double sum = 0;
          for (int64_t j = 0; j < s.n_kv; ++j) sum += m.allowed(b, i, j) ? std::exp(P[j] - mx) : 0.0;
          for (int64_t j = 0; j < s.n_kv; ++j) {
            P[j] = m.allowed(b, i, j) ? std::exp(P[j] - mx) / sum : 0.0;
            const auto index = static_cast<uint64_t>(((b * H + h) * s.n_q + i) * s.n_kv + j);
            M[j] = dropout_kept(drop.key, index, drop.threshold) ? drop.scale : 0.0;
            if (m.allowed(b, i, j)) {
              ++seen;
              kept += M[j] > 0;
            }
          }
          double D = 0;
          std::vector<double> dP(static_cast<size_t>(s.n_kv), 0.0);
          for (int64_t j = 0; j < s.n_kv; ++j) {
            if (P[j] == 0.0) continue;
            const double* vj = d.vv.at(b, j, g);
            const double* go = d.doutv.at(b, i, h);
            double dot = 0;
            for (int64_t e = 0; e < hd; ++e) {
              wo.at(b, i, h)[e] += P[j] * M[j] * vj[e];
              wv.at(b, j, g)[e] += P[j] * M[j] * go[e];
              dot += go[e] * vj[e];
            }
            dP[j] = dot * M[j];
            D += P[j] * dP[j];
          }
          for (int64_t j = 0; j < s.n_kv; ++j) {
            if (P[j] == 0.0) continue;
            const double dS = P[j] * (dP[j] - D) * sm;
            for (int64_t e = 0; e < hd; ++e) {
              wq.at(b, i, h)[e] += dS * d.kv.at(b, j, g)[e];
              wk.at(b, j, g)[e] += dS * d.qv.at(b, i, h)[e];
            }
          }
        }
    // The mask really drops about p of the allowed probabilities.
    if (seen > 1000) {
      EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(seen), 1 - p, 0.03);
    }
    const test::Layout qa = test::q_layout(c), ka = test::kv_layout(c);
    return std::vector<test::Compared>{test::compared("out", out, want_out, qa), test::compared("dq", dq, wdq, qa),
                                       test::compared("dk", dk, wdk, ka), test::compared("dv", dv, wdv, ka)};
  });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;

  for (const int64_t N : {1, 70, 150})
    for (const bool causal : {true, false}) {
      Case c;
      c.batch = 2;
      c.n_q = c.n_kv = N;
      c.n_heads = 4;
      c.n_kv_heads = 2;
      c.head_dim = 16;
      c.causal = causal;
      c.seed = static_cast<uint64_t>(N) + 3;
      cases.push_back(dropout_case(c, true));
      cases.push_back(dropout_case(c, false));
    }
  return cases;
}

class AttentionDropoutOps : public test::OpCaseTest {};
TEST_P(AttentionDropoutOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, AttentionDropoutOps, ::testing::ValuesIn(op_cases()), test::case_name);

}  // namespace
}  // namespace tformer
