// Embedding gather and scatter-add: a hand-worked example with repeated ids, id range errors,
// backward against finite differences, float against double, thread-count independence.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "kernels/embedding.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;
using test::random_values;
using ::testing::HasSubstr;

template <typename T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

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
  for (const auto& [ids, pos, id] : {std::tuple{std::vector<TokenId>{1, 4, 0}, "position 1", "id 4"},
                                     std::tuple{std::vector<TokenId>{0, 3, -1}, "position 2", "id -1"}}) {
    try {
      embedding_forward<float>(out.data(), ids.data(), table.data(), 3, 4, 2);
      ADD_FAILURE() << "no exception for " << id;
    } catch (const Error& e) {
      EXPECT_THAT(std::string(e.what()), HasSubstr(pos));
      EXPECT_THAT(std::string(e.what()), HasSubstr(id));
    }
    EXPECT_EQ(out, std::vector<float>(6, -3.0f)) << "output written before the check";
    std::vector<float> dtable(8, 0.0f);
    EXPECT_THROW(embedding_backward<float>(dtable.data(), out.data(), ids.data(), 3, 4, 2), Error);
    EXPECT_EQ(dtable, std::vector<float>(8, 0.0f));
  }
}

TEST(Embedding, BackwardMatchesFiniteDifferencesWithRepeatedIds) {
  const int64_t vocab = 6, d = 4, n = 8;
  const std::vector<TokenId> ids{3, 1, 3, 5, 3, 0, 1, 2};  // 3 three times, 1 twice, 4 unused
  std::vector<double> table = random_values(vocab * d, 171);
  const std::vector<double> r = random_values(n * d, 172, -1.0, 2.0);
  auto loss = [&] {
    std::vector<double> out(n * d);
    embedding_forward<double>(out.data(), ids.data(), table.data(), n, vocab, d);
    double s = 0;
    for (int64_t i = 0; i < n * d; ++i) s += r[i] * out[i];
    return s;
  };
  std::vector<double> dtable(vocab * d, -0.625);
  embedding_backward<double>(dtable.data(), r.data(), ids.data(), n, vocab, d);
  for (auto& v : dtable) v += 0.625;
  EXPECT_LT(test::gradient_error(dtable, test::numeric_gradient(loss, table)), 1e-6);
  for (int64_t j = 0; j < d; ++j) EXPECT_EQ(dtable[4 * d + j], 0.0);  // unused row
}

TEST(Embedding, FloatMatchesDouble) {
  const int64_t vocab = 11, d = 13, n = 40;
  std::vector<TokenId> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<TokenId>((i * 7 + 3) % vocab);
  const auto table = random_values(vocab * d, 181), dout = random_values(n * d, 182);
  const auto tf = as<float>(table), dof = as<float>(dout);
  std::vector<double> out(n * d), dt(vocab * d);
  std::vector<float> outf(n * d), dtf(vocab * d);
  embedding_forward<double>(out.data(), ids.data(), table.data(), n, vocab, d);
  embedding_forward<float>(outf.data(), ids.data(), tf.data(), n, vocab, d);
  embedding_backward<double>(dt.data(), dout.data(), ids.data(), n, vocab, d);
  embedding_backward<float>(dtf.data(), dof.data(), ids.data(), n, vocab, d);
  // The gather is a copy: exact up to the float rounding of the table itself.
  EXPECT_TRUE(all_close(outf, as<float>(out), 0, 0));
  // The scatter sums ~4 terms of size <= 1 per element in float: a few 1e-7 absolute.
  EXPECT_TRUE(all_close(dtf, dt, 1e-6, 1e-6));
}

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
