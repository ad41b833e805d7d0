// Shared test helpers:
//   * all_close: closeness with a combined tolerance that reports the worst element;
//   * numeric_gradient, gradient_error: central finite differences in double precision;
//   * random_values, as<T>: deterministic test data and its conversion to float or double;
//   * TempDir: a fresh directory under the system temp dir, removed with its contents;
//   * shared_data_dir, TF_SKIP_WITHOUT_SHARED: the corpora beside the repository (../shared);
//   * EXPECT_ERROR, error_of: a statement throws tformer::Error of a given kind about a given field;
//   * the op table (OpBounds, OpCase, check_case): each kernel's fast path against its plain
//     reference and its backward against central differences, as cases with per-op error bounds.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "core/rng.h"

namespace tformer::test {

// Passes when |a_i - ref_i| <= atol + rtol * |ref_i| for every i; on failure names the worst index,
// both values and the difference.
template <typename A, typename B>
::testing::AssertionResult all_close(const A* a, const B* ref, int64_t n, double rtol, double atol) {
  int64_t worst = -1;
  double worst_excess = 0, worst_diff = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(a[i]), r = static_cast<double>(ref[i]);
    const double diff = std::abs(x - r);
    const double excess = diff - (atol + rtol * std::abs(r));
    if (!(excess <= 0) && (worst < 0 || !(excess <= worst_excess))) {  // NaN counts as a failure
      worst = i;
      worst_excess = excess;
      worst_diff = diff;
    }
  }
  if (worst < 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(17);
  os << "element " << worst << " of " << n << ": got " << static_cast<double>(a[worst]) << ", expected "
     << static_cast<double>(ref[worst]) << " (|diff| " << worst_diff << " > atol " << atol << " + rtol " << rtol
     << " * |expected|)";
  return ::testing::AssertionFailure() << os.str();
}

template <typename A, typename B>
::testing::AssertionResult all_close(const std::vector<A>& a, const std::vector<B>& ref, double rtol, double atol) {
  if (a.size() != ref.size())
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << ref.size();
  return all_close(a.data(), ref.data(), static_cast<int64_t>(a.size()), rtol, atol);
}

// Central differences of a scalar function f at x. Coordinate i is perturbed by
// +-h * max(1, |x_i|): a step relative to the coordinate's size once it exceeds 1, so a large input
// (a row offset by 40, logits of 4) is not perturbed by a step that its own rounding (ulp(40) =
// 7e-15) and the loss's round-off turn into a visible error. The quotient divides by the step
// actually represented, (x_i + h_i) - (x_i - h_i), not by 2 h_i. A coordinate that is not finite
// (-inf, a masked score) has difference 0: -inf +- a step is not a neighbouring point (-inf + inf
// would be NaN).
inline std::vector<double> numeric_gradient(const std::function<double()>& f, std::vector<double>& x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    if (!std::isfinite(saved)) {  // a masked -inf score: no step moves it, the function ignores it
      g[i] = 0;
      continue;
    }
    const double step = h * std::max(1.0, std::abs(saved));
    const double up = saved + step, down = saved - step;
    x[i] = up;
    const double fp = f();
    x[i] = down;
    const double fm = f();
    x[i] = saved;
    g[i] = (fp - fm) / (up - down);
  }
  return g;
}

// The relative error of one gradient component against its central difference:
// |a - n| / max(|a|, |n|, floor), the conventional measure, against the larger of the two
// magnitudes. The floor only keeps exactly-zero gradients from dividing by zero: a masked entry the
// loss does not depend on has analytic 0 and numeric exactly 0 (f(x + h) and f(x - h) are the same
// number), so 0 / floor = 0. It is far below any real gradient component in these tests, so it
// never loosens a real comparison.
inline double gradient_component_error(double analytic, double numeric, double floor = 1e-8) {
  return std::abs(analytic - numeric) / std::max({std::abs(analytic), std::abs(numeric), floor});
}

// max_i gradient_component_error(analytic_i, numeric_i). (An earlier version divided by
// |a_i| + |n_i|, which is up to twice as lenient.)
inline double gradient_error(const std::vector<double>& analytic, const std::vector<double>& numeric,
                             double floor = 1e-8) {
  EXPECT_EQ(analytic.size(), numeric.size()) << "gradient_error: sizes differ";
  double worst = 0;
  for (size_t i = 0; i < analytic.size() && i < numeric.size(); ++i)
    worst = std::max(worst, gradient_component_error(analytic[i], numeric[i], floor));
  return worst;
}

// Deterministic test data: n values uniform in [lo, hi) from (seed, stream).
inline std::vector<double> random_values(int64_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * uniform_at(seed, 0, static_cast<uint64_t>(i));
  return v;
}

// The values of v converted to T (as<float>(x): x rounded to float; as<double>(xf): widened).
template <typename T, typename U>
std::vector<T> as(const std::vector<U>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// ---------------------------------------------------------------------------------------------
// Temporary files.

// A fresh, empty directory under the system temp dir, removed with everything in it when the
// object goes out of scope. Its name holds the running test's name (letters, digits and '_'
// only), the process id and a counter, and it is created only if it did not exist, so two tests,
// two processes or two TempDirs in one test never share one.
class TempDir {
 public:
  TempDir() {
    namespace fs = std::filesystem;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "_" + info->name() : "test";
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    name = "tformer_" + name.substr(0, 120) + "_" + std::to_string(::getpid());
    static std::atomic<int> counter{0};
    do {
      path_ = fs::temp_directory_path() / (name + "_" + std::to_string(counter++));
    } while (!fs::create_directory(path_));
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside the directory.
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// ---------------------------------------------------------------------------------------------
// The corpora beside the repository.

// ../shared/data next to the source tree: the subword-nmt corpora and codes files. A fresh clone
// does not have it; the tests that need it skip, saying so, with TF_SKIP_WITHOUT_SHARED.
inline std::filesystem::path shared_data_dir() {
  return std::filesystem::path(TFORMER_SOURCE_DIR).parent_path() / "shared" / "data";
}

// The names among `files` that shared_data_dir() lacks, comma-separated ("" when all are there).
inline std::string missing_shared_files(std::initializer_list<const char*> files) {
  std::string missing;
  for (const char* f : files)
    if (!std::filesystem::exists(shared_data_dir() / f)) missing += (missing.empty() ? "" : ", ") + std::string(f);
  return missing;
}

// Skips the current test (GTEST_SKIP, with the reason) unless every named file is in
// shared_data_dir(). In a helper function it skips the rest of that function and marks the test
// skipped.
#define TF_SKIP_WITHOUT_SHARED(...)                                                                    \
  do {                                                                                                 \
    const std::string tf_missing_ = ::tformer::test::missing_shared_files({__VA_ARGS__});              \
    if (!tf_missing_.empty())                                                                          \
      GTEST_SKIP() << "needs " << tf_missing_ << " in " << ::tformer::test::shared_data_dir().string() \
                   << " (the corpora beside the repository; a fresh clone does not have them)";        \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Errors.

// Runs f and checks that it throws tformer::Error with this kind and field and, when given, a
// message containing each of `naming` (numbers the message must name: "9 tokens"). A failure
// shows what was thrown instead, with its message.
template <typename F, typename... Naming>
::testing::AssertionResult throws_error(F&& f, ErrorKind kind, std::string_view field, const Naming&... naming) {
  try {
    f();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (e.kind() != kind || e.field() != field)
      return ::testing::AssertionFailure()
             << "threw a " << to_string(e.kind()) << " error about \"" << e.field() << "\", expected a "
             << to_string(kind) << " error about \"" << field << "\"; the message: " << what;
    for (std::string_view n : std::initializer_list<std::string_view>{std::string_view(naming)...})
      if (what.find(n) == std::string::npos)
        return ::testing::AssertionFailure() << "the message does not name \"" << n << "\": " << what;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a std::exception that is not a tformer::Error: " << e.what();
  } catch (...) {
    return ::testing::AssertionFailure() << "threw something that is not a std::exception";
  }
  return ::testing::AssertionFailure() << "threw nothing, expected a " << to_string(kind) << " error about \"" << field
                                       << "\"";
}

// EXPECT_ERROR(statement, ErrorKind::BadConfig, "vocab_size"): the statement throws tformer::Error
// of that kind about that field. Further arguments are strings the message must contain.
#define EXPECT_ERROR(statement, kind, ...) \
  EXPECT_TRUE(::tformer::test::throws_error([&] { statement; }, kind, __VA_ARGS__))
#define ASSERT_ERROR(statement, kind, ...) \
  ASSERT_TRUE(::tformer::test::throws_error([&] { statement; }, kind, __VA_ARGS__))

// The tformer::Error that f throws (a test failure, and an Internal error with an empty field and
// message, when it throws none), for tests that look at several of its parts.
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a std::exception that is not a tformer::Error: " << e.what();
    return Error(ErrorKind::Internal, "", "");
  }
  ADD_FAILURE() << "threw nothing, expected a tformer::Error";
  return Error(ErrorKind::Internal, "", "");
}

// ---------------------------------------------------------------------------------------------
// The op table.
//
// Each kernel test file declares its operations with their error bounds (one OpBounds per
// operation: a bound per compared output, and one for gradients against central differences) and
// a list of cases (OpCase: the operation, one point of a sweep over awkward shapes, and what to
// check there):
//   * compare: runs the fast path and its plain reference (the double kernel, the naive loop, the
//     reference attention, PyTorch's stored outputs) and returns their outputs side by side, by
//     name; each is held to its own bound in the operation's entry;
//   * gradient: the point, the backward's gradient there and the loss as a function of the
//     inputs; each gradient is held to the operation's bound against numeric_gradient.
// Each case is a test of its own:
//
//   const test::OpBounds kSoftmax{"softmax<float> vs double", {{"y", {.rtol = 1e-5, .atol = 1e-6}}}};
//   std::vector<test::OpCase> cases() { return {test::compare_case(kSoftmax, "rows=7 cols=33", [] {...})}; }
//   class SoftmaxOps : public test::OpCaseTest {};
//   TEST_P(SoftmaxOps, WithinBounds) { test::check_case(GetParam()); }
//   INSTANTIATE_TEST_SUITE_P(Table, SoftmaxOps, ::testing::ValuesIn(cases()), test::case_name);
//
// A failure names the case, the output, the worst element and its position in the output's
// layout ([b=1, i=17, h=2, e=5]), both values, the difference and the bound, and how many
// elements are outside it.

// |got_i - want_i| <= atol + atol_of_max * max_j |want_j| + rtol * |want_i| + rtol_of_scale * scale_i.
// Equal values always pass, so a -inf where the reference has -inf (a masked entry) matches; a NaN
// never does. atol_of_max serves components small by cancellation, where a relative error says
// nothing; rtol_of_scale, an error model with a magnitude per element (Compared::scale).
struct Bound {
  double rtol = 0;
  double atol = 0;
  double atol_of_max = 0;
  double rtol_of_scale = 0;
};

// One operation under test (usually one precision of one kernel against one reference) and its
// error bounds.
struct OpBounds {
  std::string op;
  std::map<std::string, Bound> outputs;  // by the name of the compared output
  double gradient = 0;                   // the largest gradient_component_error allowed (strictly below)
};

// The position of a flat index in a row-major tensor: Layout{{{"b", 2}, {"i", 5}}}.where(7) is
// "[b=1, i=2]". With no dimensions, the flat index itself.
struct Layout {
  std::vector<std::pair<std::string, int64_t>> dims;

  std::string where(int64_t flat) const {
    std::ostringstream os;
    os << "[";
    if (dims.empty()) os << flat;
    std::vector<int64_t> idx(dims.size());
    int64_t rest = flat;
    for (size_t d = dims.size(); d-- > 0;) {
      const int64_t n = std::max<int64_t>(dims[d].second, 1);
      idx[d] = d == 0 ? rest : rest % n;
      rest = d == 0 ? 0 : rest / n;
    }
    for (size_t d = 0; d < dims.size(); ++d) os << (d ? ", " : "") << dims[d].first << "=" << idx[d];
    os << "]";
    return os.str();
  }
};

// One output of the fast path beside the same output of its reference. `name` selects the bound
// in the operation's entry; `label` tells apart outputs that share one ("beta=0.5", "ta=1").
struct Compared {
  std::string name;
  std::vector<double> got, want;
  Layout layout;
  std::vector<double> scale;  // per element, for Bound::rtol_of_scale; empty when the bound has none
  std::string label;
};

template <typename A, typename B>
Compared compared(std::string name, const std::vector<A>& got, const std::vector<B>& want, Layout layout = {},
                  std::string label = "") {
  return {std::move(name), as<double>(got), as<double>(want), std::move(layout), {}, std::move(label)};
}

// One input of a gradient check: its value at the point of the check and the backward's gradient
// of the loss with respect to it there.
struct Differentiated {
  std::string name;
  std::vector<double> at, analytic;
  Layout layout;
};

struct GradientCheck {
  std::vector<Differentiated> inputs;
  // The loss as a function of the inputs' values, in the order of `inputs`; the check perturbs one
  // coordinate at a time.
  std::function<double(const std::vector<std::vector<double>>&)> loss;
};

struct OpCase {
  const OpBounds* op = nullptr;
  std::string params;                              // the point of the sweep, for names and messages
  std::function<std::vector<Compared>()> compare;  // may be empty
  std::function<GradientCheck()> gradient;         // may be empty
};

inline OpCase compare_case(const OpBounds& op, std::string params, std::function<std::vector<Compared>()> compare) {
  OpCase c;
  c.op = &op;
  c.params = std::move(params);
  c.compare = std::move(compare);
  return c;
}

inline OpCase gradient_case(const OpBounds& op, std::string params, std::function<GradientCheck()> gradient) {
  OpCase c;
  c.op = &op;
  c.params = std::move(params);
  c.gradient = std::move(gradient);
  return c;
}

inline void PrintTo(const OpCase& c, std::ostream* os) { *os << (c.op ? c.op->op : "?") << " " << c.params; }

// A test name from the operation and the parameters: letters and digits kept, the rest '_'.
inline std::string case_name(const ::testing::TestParamInfo<OpCase>& info) {
  std::string raw = (info.param.op ? info.param.op->op : "op") + " " + info.param.params, name;
  for (char c : raw) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) != 0;
    if (keep)
      name += c;
    else if (!name.empty() && name.back() != '_')
      name += '_';
  }
  while (!name.empty() && name.back() == '_') name.pop_back();
  return name.empty() ? "case" + std::to_string(info.index) : name;
}

inline ::testing::AssertionResult within(const Compared& c, const Bound& b) {
  if (c.got.size() != c.want.size())
    return ::testing::AssertionFailure() << "output " << c.name << " " << c.label << ": sizes differ, got "
                                         << c.got.size() << " elements, expected " << c.want.size();
  if (!c.scale.empty() && c.scale.size() != c.want.size())
    return ::testing::AssertionFailure() << "output " << c.name << " " << c.label << ": " << c.scale.size()
                                         << " scales for " << c.want.size() << " elements";
  double max_ref = 0;
  if (b.atol_of_max != 0)
    for (double r : c.want)
      if (std::isfinite(r)) max_ref = std::max(max_ref, std::abs(r));
  const double atol = b.atol_of_max != 0 ? b.atol + b.atol_of_max * max_ref : b.atol;
  int64_t worst = -1, n_out = 0;
  double worst_excess = 0, worst_bound = 0;
  for (size_t i = 0; i < c.want.size(); ++i) {
    const double x = c.got[i], r = c.want[i];
    if (x == r) continue;
    double bound = atol + b.rtol * std::abs(r);
    if (!c.scale.empty()) bound += b.rtol_of_scale * c.scale[i];
    const double excess = std::abs(x - r) - bound;
    if (excess <= 0) continue;
    ++n_out;  // also a NaN: its excess compares false
    if (worst < 0 || !(excess <= worst_excess)) {
      worst = static_cast<int64_t>(i);
      worst_excess = excess;
      worst_bound = bound;
    }
  }
  if (worst < 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(17);
  const double x = c.got[worst], r = c.want[worst];
  os << "output " << c.name << (c.label.empty() ? "" : " (" + c.label + ")") << " " << c.layout.where(worst)
     << " (element " << worst << " of " << c.want.size() << "; " << n_out << " outside the bound): got " << x
     << ", expected " << r << ", |diff| " << std::abs(x - r) << " > " << worst_bound << " = atol " << atol << " + rtol "
     << b.rtol << " * |expected|";
  if (!c.scale.empty()) os << " + " << b.rtol_of_scale << " * scale " << c.scale[worst];
  return ::testing::AssertionFailure() << os.str();
}

inline ::testing::AssertionResult gradient_within(const Differentiated& d, const std::vector<double>& numeric,
                                                  double bound) {
  if (d.analytic.size() != numeric.size())
    return ::testing::AssertionFailure() << "gradient with respect to " << d.name << ": " << d.analytic.size()
                                         << " analytic components for " << numeric.size() << " coordinates";
  int64_t worst = -1, n_out = 0;
  double worst_err = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double err = gradient_component_error(d.analytic[i], numeric[i]);
    if (err < bound) continue;
    ++n_out;  // also a NaN
    if (worst < 0 || !(err <= worst_err)) {
      worst = static_cast<int64_t>(i);
      worst_err = err;
    }
  }
  if (worst < 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(17);
  os << "gradient with respect to " << d.name << " " << d.layout.where(worst) << " (element " << worst << " of "
     << numeric.size() << "; " << n_out << " outside the bound): analytic " << d.analytic[worst]
     << ", central difference " << numeric[worst] << ", relative error " << worst_err << " >= " << bound;
  return ::testing::AssertionFailure() << os.str();
}

// Runs one case: every compared output against its bound, every gradient against central
// differences.
inline void check_case(const OpCase& c) {
  ASSERT_NE(c.op, nullptr) << c.params << ": a case without an operation";
  SCOPED_TRACE(c.op->op + " " + c.params);
  ASSERT_TRUE(c.compare || c.gradient) << "the case checks nothing";
  if (c.compare) {
    for (const Compared& out : c.compare()) {
      const auto it = c.op->outputs.find(out.name);
      if (it == c.op->outputs.end()) {
        ADD_FAILURE() << "the table has no bound for output " << out.name << " of " << c.op->op;
        continue;
      }
      EXPECT_TRUE(within(out, it->second));
    }
  }
  if (c.gradient) {
    ASSERT_GT(c.op->gradient, 0) << "the table has no gradient bound for " << c.op->op;
    const GradientCheck g = c.gradient();
    std::vector<std::vector<double>> x;
    for (const Differentiated& d : g.inputs) x.push_back(d.at);
    for (size_t k = 0; k < g.inputs.size(); ++k) {
      const std::vector<double> numeric = numeric_gradient([&] { return g.loss(x); }, x[k]);
      EXPECT_TRUE(gradient_within(g.inputs[k], numeric, c.op->gradient));
    }
  }
}

// The fixture of a file's table: `class SoftmaxOps : public test::OpCaseTest {};` then TEST_P and
// INSTANTIATE_TEST_SUITE_P as in the example above.
class OpCaseTest : public ::testing::TestWithParam<OpCase> {};

}  // namespace tformer::test
