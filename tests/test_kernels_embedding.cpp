// Embedding gather and scatter-add: a hand-worked example with repeated ids, id range errors; the
// op table: float against double, the backward against finite differences (repeated ids),
// PyTorch's outputs and gradients (fixtures/kernels.json); thread-count independence.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "kernel_fixtures.h"
#include "kernels/embedding.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::as;
using test::random_values;

TEST(Embedding, HandComputedGatherAndScatterAdd) {
  // table (vocab 4, d 3): row v = [10v, 10v + 1, 10v + 2.5]; ids [2, 0, 2, 3].
  const std::vector<double> table{0, 1, 2.5, 10, 11, 12.5, 20, 21, 22.5, 30, 31, 32.5};
  const std::vector<TokenId> ids{2, 0, 2, 3};
  std::vector<double> out(12);
  embedding_forward<double>(out.data(), ids.data(), table.data(), 4, 4, 3);
  EXPECT_EQ(out, (std::vector<double>{20, 21, 22.5, 0, 1, 2.5, 20, 21, 22.5, 30, 31, 32.5}));
  // dout rows [1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]; dtable starts at 0.5 everywhere.
  //   row 0 += dout[1] = [4, 5, 6]          -> [4.5, 5.5, 6.5]
  //   row 1 (unused) stays                     [0.5, 0.5, 0.5]
  //   row 2 += dout[0] + dout[2] = [8, 10, 12] -> [8.5, 10.5, 12.5]
  //   row 3 += dout[3] = [10, 11, 12]       -> [10.5, 11.5, 12.5]
  const std::vector<double> dout{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<double> dtable(12, 0.5);
  embedding_backward<double>(dtable.data(), dout.data(), ids.data(), 4, 4, 3);
  EXPECT_EQ(dtable, (std::vector<double>{4.5, 5.5, 6.5, 0.5, 0.5, 0.5, 8.5, 10.5, 12.5, 10.5, 11.5, 12.5}));
}

TEST(Embedding, IdOutsideVocabThrowsNamingPositionAndId) {
  const std::vector<float> table(4 * 2, 1.0f);
  std::vector<float> out(3 * 2, -3.0f);
  for (const auto& c : {std::tuple{std::vector<TokenId>{1, 4, 0}, "position 1", "id 4"},
                        std::tuple{std::vector<TokenId>{0, 3, -1}, "position 2", "id -1"}}) {
    // Plain references, not a structured binding: EXPECT_ERROR's lambda captures them, which
    // clang before 16 (the parser of clang-tidy 14) refuses for a binding.
    const std::vector<TokenId>& ids = std::get<0>(c);
    const char* pos = std::get<1>(c);
    const char* id = std::get<2>(c);
    EXPECT_ERROR(embedding_forward<float>(out.data(), ids.data(), table.data(), 3, 4, 2), ErrorKind::BadInput, pos, id);
    EXPECT_EQ(out, std::vector<float>(6, -3.0f)) << "output written before the check";
    std::vector<float> dtable(8, 0.0f);
    EXPECT_ERROR(embedding_backward<float>(dtable.data(), out.data(), ids.data(), 3, 4, 2), ErrorKind::BadInput, pos,
                 id);
    EXPECT_EQ(dtable, std::vector<float>(8, 0.0f));
  }
}

// ---------------------------------------------------------------------------------------------
// The op table.
//
// Float against double: the gather is a copy, exact up to the float rounding of the table itself
// (compared with the double result rounded to float); the scatter sums ~n / vocab terms of size
// <= 1 per element in float: a few 1e-7 absolute, held to 1e-6. The backward of the double kernel
// against central differences: 1e-6.
const test::OpBounds kEmbedding{"embedding", {{"out", {}}, {"dtable", {.rtol = 1e-6, .atol = 1e-6}}}, 1e-6};
// PyTorch's outputs and gradients (kernel_fixtures.h has the bounds' reasons); the gather only
// relative.
const test::OpBounds kEmbeddingTorchDouble{"embedding<double> vs torch",
                                           {{"y", test::torch_rtol<double>()}, {"dtable", test::kTorchDouble}}};
const test::OpBounds kEmbeddingTorchFloat{"embedding<float> vs torch",
                                          {{"y", test::torch_rtol<float>()}, {"dtable", test::kTorchFloat}}};

struct Shape {
  int64_t vocab, d, n;
  uint64_t seed;
  std::string str() const {
    return "vocab=" + std::to_string(vocab) + " d=" + std::to_string(d) + " n=" + std::to_string(n);
  }
};

test::OpCase float_vs_double(const Shape& sh) {
  return test::compare_case(kEmbedding, "float vs double " + sh.str(), [sh] {
    const int64_t vocab = sh.vocab, d = sh.d, n = sh.n;
    std::vector<TokenId> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<TokenId>((i * 7 + 3) % vocab);
    const auto table = random_values(vocab * d, sh.seed), dout = random_values(n * d, sh.seed + 1);
    const auto tf = as<float>(table), dof = as<float>(dout);
    std::vector<double> out(n * d), dt(vocab * d);
    std::vector<float> outf(n * d), dtf(vocab * d);
    embedding_forward<double>(out.data(), ids.data(), table.data(), n, vocab, d);
    embedding_forward<float>(outf.data(), ids.data(), tf.data(), n, vocab, d);
    embedding_backward<double>(dt.data(), dout.data(), ids.data(), n, vocab, d);
    embedding_backward<float>(dtf.data(), dof.data(), ids.data(), n, vocab, d);
    return std::vector<test::Compared>{test::compared("out", outf, as<float>(out), {{{"i", n}, {"e", d}}}),
                                       test::compared("dtable", dtf, dt, {{{"v", vocab}, {"e", d}}})};
  });
}

// loss = sum(r * out) with repeated ids; the gradient buffer starts non-zero (the backward
// accumulates); an unused row's gradient is exactly 0.
test::OpCase finite_differences(int64_t vocab, int64_t d, const std::vector<TokenId>& ids, uint64_t seed) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const Shape sh{vocab, d, n, seed};
  return test::gradient_case(kEmbedding, "finite differences " + sh.str(), [vocab, d, n, ids, seed] {
    const std::vector<double> table = random_values(vocab * d, seed), r = random_values(n * d, seed + 1, -1.0, 2.0);
    auto loss = [=](const std::vector<std::vector<double>>& in) {
      std::vector<double> out(n * d);
      embedding_forward<double>(out.data(), ids.data(), in[0].data(), n, vocab, d);
      double s = 0;
      for (int64_t i = 0; i < n * d; ++i) s += r[i] * out[i];
      return s;
    };
    std::vector<double> dtable(vocab * d, -0.625);
    embedding_backward<double>(dtable.data(), r.data(), ids.data(), n, vocab, d);
    for (auto& v : dtable) v += 0.625;
    for (int64_t v = 0; v < vocab; ++v)
      if (std::find(ids.begin(), ids.end(), v) == ids.end()) {
        for (int64_t j = 0; j < d; ++j) EXPECT_EQ(dtable[v * d + j], 0.0) << "unused row " << v;
      }
    return test::GradientCheck{{{"table", table, dtable, {{{"v", vocab}, {"e", d}}}}}, loss};
  });
}

// PyTorch's outputs and gradients for the fixture's inputs, in T.
template <typename T>
test::OpCase torch_case() {
  return test::compare_case(std::is_same_v<T, double> ? kEmbeddingTorchDouble : kEmbeddingTorchFloat, "fixture", [] {
    const auto& c = test::kernel_fixture("embedding");
    const int64_t n = c.at("n"), vocab = c.at("vocab"), d = c.at("d");
    const auto ids = c.at("ids").get<std::vector<TokenId>>();
    const auto table = as<T>(test::fixture_values(c, "table")), r = as<T>(test::fixture_values(c, "r"));
    std::vector<T> y(n * d), dt(vocab * d);
    embedding_forward<T>(y.data(), ids.data(), table.data(), n, vocab, d);
    embedding_backward<T>(dt.data(), r.data(), ids.data(), n, vocab, d);
    return std::vector<test::Compared>{
        test::compared("y", y, test::fixture_values(c, "y"), {{{"i", n}, {"e", d}}}),
        test::compared("dtable", dt, test::fixture_values(c, "dtable"), {{{"v", vocab}, {"e", d}}})};
  });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  for (const Shape& sh : {Shape{11, 13, 40, 181}, Shape{1, 1, 1, 183}, Shape{5, 64, 100, 184}, Shape{300, 3, 7, 185}})
    cases.push_back(float_vs_double(sh));
  cases.push_back(finite_differences(6, 4, {3, 1, 3, 5, 3, 0, 1, 2}, 171));  // 3 three times, 1 twice, 4 unused
  cases.push_back(finite_differences(1, 1, {0}, 173));
  cases.push_back(finite_differences(4, 7, {2, 2, 2}, 174));
  cases.push_back(torch_case<double>());
  cases.push_back(torch_case<float>());
  return cases;
}

class EmbeddingOps : public test::OpCaseTest {};
TEST_P(EmbeddingOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, EmbeddingOps, ::testing::ValuesIn(op_cases()), test::case_name);

TEST(Embedding, SameResultWithOneAndTwoThreads) {
  // 200 positions x 200 features = 40000: above the 2^15 threshold, four column blocks.
  const int64_t vocab = 17, d = 200, n = 200;
  std::vector<TokenId> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<TokenId>((i * i + 5) % vocab);
  const auto table = as<float>(random_values(vocab * d, 191)), dout = as<float>(random_values(n * d, 192));
  auto run = [&](int threads) {
    set_num_threads(threads);
    std::vector<float> out(n * d), dt(vocab * d, 0.5f);
    embedding_forward<float>(out.data(), ids.data(), table.data(), n, vocab, d);
    embedding_backward<float>(dt.data(), dout.data(), ids.data(), n, vocab, d);
    return std::vector<std::vector<float>>{out, dt};
  };
  const auto one = run(1), two = run(2);
  set_num_threads(0);
  EXPECT_EQ(one[0], two[0]);
  EXPECT_EQ(one[1], two[1]);
}

}  // namespace
}  // namespace tformer
