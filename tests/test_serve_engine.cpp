// The server's inference loop (src/serve/engine.h): continuous batching whose results do not
// depend on the batch. A sequence's logits are bit-identical alone or beside others (checked on the
// model's forward with slots, for float32 and every stored type, and through the engine's exact
// log-probabilities); a seeded request returns what generate() returns; stop strings, limits,
// cancellation and shutdown.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/utf8.h"
#include "generate/generator.h"
#include "kernels/linear.h"
#include "model/checkpoint.h"
#include "model/gguf_model.h"
#include "random_model.h"
#include "serve/engine.h"
#include "test_util.h"
#include "tokenizer/char_tokenizer.h"

namespace tformer {
namespace {

using serve::CompletionJob;
using serve::Engine;
using serve::EngineOptions;
using serve::Stream;

// A model a third of random_model's scale (nearer a trained one's), on the byte vocabulary.
std::unique_ptr<Model> test_model(const char* overrides, uint64_t seed) {
  auto m = test::random_model(test::small_config(overrides), seed);
  for (const auto& e : m->params().entries())
    if (e.shape.rank() == 2)
      for (int64_t i = 0; i < e.shape.numel(); ++i) m->params().data()[e.offset + i] /= 3;
  return m;
}

constexpr const char* kConfig = R"({"context_length": 96, "d_model": 64, "d_ff": 96, "n_heads": 4,
                                    "n_kv_heads": 2, "positions": "rope", "norm": "rmsnorm",
                                    "activation": "swiglu", "bias": false, "tied_embeddings": false})";

// The decode forward of 16 sequences at scattered slots, under RowIndependentProducts, gives each
// the bits of its own one-sequence forward: for float32 weights and every stored type (whose
// tiled products, taken from 8 rows on, are not used in this mode).
// The test model in float32 and, through GGUF files, in BF16, Q8_0 and Q4_0.
struct ModelsOfEveryType {
  test::TempDir tmp;
  std::vector<std::unique_ptr<Model>> models;
  std::vector<std::string> names;
  ModelsOfEveryType() {
    const auto tok = CharTokenizer::bytes();
    models.push_back(test_model(kConfig, 5));
    names.push_back("f32");
    for (const auto& [type, name] : {std::pair{GgufExportType::BF16, "bf16"}, std::pair{GgufExportType::Q8_0, "q8_0"},
                                     std::pair{GgufExportType::Q4_0, "q4_0"}}) {
      const std::string p = (tmp.path() / (std::string(name) + ".gguf")).string();
      export_gguf(p, *models[0], tok, "", type);
      models.push_back(std::move(load_model(p).model));
      names.push_back(name);
    }
  }
};

TEST(ServeEngine, DecodeWithSlotsGivesEachSequenceTheBitsOfItsOwnForward) {
  const ModelsOfEveryType every;
  for (size_t mi = 0; mi < every.models.size(); ++mi) {
    SCOPED_TRACE(every.names[mi]);
    Model& m = *every.models[mi];
    const int64_t V = m.config().vocab_size, S = 20, B = 16;
    // Sequence b (b < 16) lives in slot (7 b + 3) mod 20, with a prompt of 1 + (5 b) mod 13 tokens.
    KVCache shared = m.make_cache(S, 64);
    std::vector<int64_t> slots;
    std::vector<std::vector<TokenId>> prompts;
    for (int64_t b = 0; b < B; ++b) {
      slots.push_back((7 * b + 3) % S);
      std::vector<TokenId> p;
      for (int64_t t = 0; t < 1 + (5 * b) % 13; ++t) p.push_back(static_cast<TokenId>((31 * b + 17 * t + 5) % V));
      prompts.push_back(p);
    }
    std::vector<float> lg(static_cast<size_t>(B * V)), one(static_cast<size_t>(V));
    for (int64_t b = 0; b < B; ++b)
      m.forward_cached(one.data(), prompts[b].data(), 1, static_cast<int64_t>(prompts[b].size()), nullptr, shared,
                       false, &slots[b]);
    std::vector<TokenId> next;
    for (int64_t b = 0; b < B; ++b) next.push_back(static_cast<TokenId>((b * 13 + 1) % V));
    for (int step = 0; step < 3; ++step) {
      {
        const RowIndependentProducts alone;
        m.forward_cached(lg.data(), next.data(), B, 1, nullptr, shared, false, slots.data());
      }
      for (int64_t b = 0; b < B; ++b) {
        // The same sequence alone, in a cache of its own, one token at a time after its prompt.
        KVCache own = m.make_cache(1, 64);
        std::vector<TokenId> ids = prompts[b];
        m.forward_cached(one.data(), ids.data(), 1, static_cast<int64_t>(ids.size()), nullptr, own, false);
        for (int s = 0; s <= step; ++s) {
          const TokenId t = static_cast<TokenId>((b * 13 + 1 + 7 * s) % V);
          m.forward_cached(one.data(), &t, 1, 1, nullptr, own, false);
        }
        ASSERT_EQ(std::memcmp(one.data(), lg.data() + b * V, static_cast<size_t>(V) * sizeof(float)), 0)
            << "sequence " << b << " step " << step;
        EXPECT_EQ(shared.length(slots[b]), own.length(0));
      }
      for (int64_t b = 0; b < B; ++b) next[b] = static_cast<TokenId>((b * 13 + 1 + 7 * (step + 1)) % V);
    }
    // Slots: distinct and inside the cache.
    std::vector<int64_t> twice = {1, 1};
    EXPECT_THROW(m.forward_cached(lg.data(), next.data(), 2, 1, nullptr, shared, false, twice.data()), Error);
    std::vector<int64_t> outside = {S};
    EXPECT_THROW(m.forward_cached(lg.data(), next.data(), 1, 1, nullptr, shared, false, outside.data()), Error);
  }
}

// The server's grouped prefill step: chunks of several sequences, each shorter than the model's
// row_independent_below, in one forward ([B, width] with padding, at scattered slots, from
// different cache lengths) under RowIndependentProducts give each sequence the bits of its chunk's
// forward alone with no such scope (what `tformer generate` runs), and leave the same keys and
// values in the cache (the decode after them agrees to the bit too). For float32 and every stored
// type.
TEST(ServeEngine, ShortPrefillChunksOfSeveralSequencesInOneForwardHaveTheBitsOfEachAlone) {
  const ModelsOfEveryType every;
  for (size_t mi = 0; mi < every.models.size(); ++mi) {
    SCOPED_TRACE(every.names[mi]);
    Model& m = *every.models[mi];
    const int64_t below = m.row_independent_below();
#if defined(__AVX512F__)
    EXPECT_EQ(below, mi == 0 ? 128 : 8);
#else
    EXPECT_EQ(below, mi == 0 ? 2 : 8);
#endif
    const int64_t V = m.config().vocab_size, S = 11, B = 6, longest = std::min<int64_t>(below - 1, 29);
    KVCache shared = m.make_cache(S, 96);
    std::vector<KVCache> own;
    std::vector<int64_t> slots;
    for (int64_t b = 0; b < B; ++b) {
      own.push_back(m.make_cache(1, 96));
      slots.push_back((4 * b + 9) % S);
    }
    std::vector<float> one(static_cast<size_t>(V));
    for (int round = 0; round < 3; ++round) {
      const bool decode = round == 2;
      std::vector<int64_t> valid;
      for (int64_t b = 0; b < B; ++b) valid.push_back(decode ? 1 : 1 + (5 * b + 3 * round + 2) % longest);
      const int64_t width = *std::max_element(valid.begin(), valid.end());
      std::vector<TokenId> ids(static_cast<size_t>(B * width), 7);  // 7: the padding, never read
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < valid[b]; ++t) ids[b * width + t] = static_cast<TokenId>((37 * b + 11 * t + round) % V);
      std::vector<float> lg(static_cast<size_t>(B * V));
      {
        const RowIndependentProducts alone;
        m.forward_cached(lg.data(), ids.data(), B, width, valid.data(), shared, false, slots.data());
      }
      for (int64_t b = 0; b < B; ++b) {
        m.forward_cached(one.data(), ids.data() + b * width, 1, valid[b], nullptr, own[b], false);
        ASSERT_EQ(std::memcmp(one.data(), lg.data() + b * V, static_cast<size_t>(V) * sizeof(float)), 0)
            << "sequence " << b << " round " << round << " (" << valid[b] << " tokens)";
        EXPECT_EQ(shared.length(slots[b]), own[b].length(0));
      }
    }
  }
}

// Everything a stream delivers until its end.
struct Result {
  std::string text, finish, error;
  std::vector<serve::TokenLogprob> logprobs;
  std::vector<std::string> pieces;
};
// What a stream delivers until its end, after the events `seen` already taken from it. A stream
// that sends nothing for 30 s fails the test instead of hanging it.
Result drain(Stream& s, std::vector<Stream::Event> seen = {}) {
  Result r;
  for (;;) {
    std::vector<Stream::Event> ev = std::move(seen);
    seen.clear();
    if (ev.empty() && !s.wait(ev, 30000)) {
      ADD_FAILURE() << "no event for 30 s";
      r.error = "timeout";
      return r;
    }
    for (auto& e : ev) {
      if (e.kind == Stream::Event::Kind::Text) {
        r.text += e.text;
        r.pieces.push_back(e.text);
        for (auto& t : e.tokens) r.logprobs.push_back(t);
      } else if (e.kind == Stream::Event::Kind::Done) {
        r.finish = e.finish_reason;
        return r;
      } else {
        r.error = e.finish_reason;
        return r;
      }
    }
  }
}

CompletionJob job_of(const Tokenizer& tok, const std::string& prompt, int64_t max_tokens, uint64_t seed,
                     double temperature = 0.8) {
  CompletionJob j;
  j.prompt = tok.encode(prompt);
  j.max_tokens = max_tokens;
  j.sampler = {temperature, 0, 0.95, seed};
  return j;
}

class ServeEngineTest : public ::testing::Test {
 protected:
  ServeEngineTest() : model_(test_model(kConfig, 11)), tok_(CharTokenizer::bytes()) {}
  std::unique_ptr<Model> model_;
  CharTokenizer tok_;
};

TEST_F(ServeEngineTest, SeededRequestReturnsWhatGenerateReturns) {
  EngineOptions o;
  o.parallel = 3;
  o.prefill_chunk = 8;
  Engine engine(*model_, tok_, o);
  for (const double temperature : {0.0, 0.8}) {
    for (const std::string prompt : {"To be", "A longer prompt of several chunks"}) {
      SCOPED_TRACE(prompt + " " + std::to_string(temperature));
      auto s = engine.submit(job_of(tok_, prompt, 40, 1234, temperature));
      ASSERT_TRUE(s);
      const Result r = drain(*s);
      EXPECT_EQ(r.finish, "length");
      GenerateOptions g;
      g.max_new_tokens = 40;
      g.sampler = {temperature, 0, 0.95, 1234};
      g.prefill_chunk = 8;
      const auto out = generate(*model_, {tok_.encode(prompt)}, g);
      EXPECT_EQ(r.text, tok_.decode(out[0]));
      EXPECT_EQ(s->completion_tokens, 40);
    }
  }
}

// One request alone, then the same request in the middle of fifteen others of mixed prompt
// lengths: the same text and the same log-probabilities to the last bit (they are computed from the
// logits, so the logits were the same). Each prompt is one prefill chunk, and the others ask for
// more tokens than the probe, so that after the sixteen prefills the probe decodes in one batch of
// sixteen rows (where the tiled products would otherwise take over).
TEST_F(ServeEngineTest, SameTokensAndLogprobsAloneOrBesideFifteenOthers) {
  EngineOptions o;
  o.parallel = 16;
  o.prefill_chunk = 64;
  Engine engine(*model_, tok_, o);
  auto probe = [&] {
    CompletionJob j = job_of(tok_, "The probe prompt", 30, 99);
    j.top_logprobs = 3;
    return j;
  };
  auto alone = engine.submit(probe());
  const Result a = drain(*alone);
  ASSERT_EQ(a.logprobs.size(), 30u);
  std::vector<std::shared_ptr<Stream>> others;
  // Submitted between two steps of the loop (on its thread), so that all sixteen wait together:
  // from this thread a step could come between two submissions, and under load (ctest -j2 on two
  // cores) the first ones then finished before the last began (max_decode_batch 15).
  engine.run_on_loop([&](Model&) {
    for (int i = 0; i < 15; ++i) {
      if (i == 7) others.push_back(engine.submit(probe()));
      others.push_back(engine.submit(
          job_of(tok_, std::string(static_cast<size_t>(1 + 2 * i), char('a' + i)), 50 + i, static_cast<uint64_t>(i))));
    }
  });
  std::vector<Result> results;
  for (auto& s : others) {
    ASSERT_TRUE(s);
    results.push_back(drain(*s));
  }
  const Result& b = results[7];
  EXPECT_EQ(b.text, a.text);
  ASSERT_EQ(b.logprobs.size(), a.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    EXPECT_EQ(b.logprobs[i].token, a.logprobs[i].token);
    EXPECT_EQ(b.logprobs[i].logprob, a.logprobs[i].logprob) << "token " << i;  // exact
    ASSERT_EQ(b.logprobs[i].top.size(), 3u);
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(b.logprobs[i].top[k], a.logprobs[i].top[k]);
    EXPECT_GE(a.logprobs[i].top[0].second, a.logprobs[i].logprob);
  }
  // Every other request also equals its own solo run.
  for (int i : {0, 5, 14}) {
    auto solo = engine.submit(
        job_of(tok_, std::string(static_cast<size_t>(1 + 2 * i), char('a' + i)), 50 + i, static_cast<uint64_t>(i)));
    EXPECT_EQ(drain(*solo).text, results[static_cast<size_t>(i < 7 ? i : i + 1)].text) << "request " << i;
  }
  const auto m = engine.metrics();
  EXPECT_EQ(m.max_decode_batch, 16);  // the probe decoded beside fifteen others
  EXPECT_EQ(m.requests, 20u);
  EXPECT_EQ(m.finished, 20u);
  EXPECT_EQ(m.ttft.count, 20u);
}

// n samples share one prefill (the others get copies of the first one's cache slots): each equals
// the request alone with its seed (seed + i), to the last bit of its log-probabilities; and when
// the first sample's client goes away during the prefill, the others still finish, the same.
TEST_F(ServeEngineTest, SamplesShareOnePrefillAndEachEqualsItsOwnRun) {
  EngineOptions o;
  o.parallel = 4;
  o.prefill_chunk = 5;
  o.step_delay_ms = 2;
  Engine engine(*model_, tok_, o);
  auto job = [&](uint64_t seed) {
    CompletionJob j = job_of(tok_, "Samples of one prompt, prefilled once", 20, seed);
    j.top_logprobs = 1;
    return j;
  };
  std::vector<Result> solo;
  for (uint64_t i = 0; i < 3; ++i) solo.push_back(drain(*engine.submit(job(40 + i))));
  EXPECT_NE(solo[0].text, solo[1].text);  // different seeds, different samples
  auto outs = engine.submit_samples(job(40), 3);
  ASSERT_EQ(outs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const Result r = drain(*outs[i]);
    EXPECT_EQ(r.text, solo[i].text) << "sample " << i;
    ASSERT_EQ(r.logprobs.size(), solo[i].logprobs.size());
    for (size_t t = 0; t < r.logprobs.size(); ++t) EXPECT_EQ(r.logprobs[t].logprob, solo[i].logprobs[t].logprob);
  }
  // (A sample cancelled while queued gets no event: its client has gone.)
  auto again = engine.submit_samples(job(40), 3);
  again[0]->cancel();
  for (size_t i = 1; i < 3; ++i) EXPECT_EQ(drain(*again[i]).text, solo[i].text) << "sample " << i;
  // Let the first sample leave in the middle of the shared prefill this time.
  auto mid = engine.submit_samples(job(40), 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(6));
  mid[0]->cancel();
  for (size_t i = 1; i < 3; ++i) EXPECT_EQ(drain(*mid[i]).text, solo[i].text) << "sample " << i;
  EXPECT_ERROR(engine.submit_samples(job(1), 5), ErrorKind::BadInput, "n", "at most 4");
}

TEST_F(ServeEngineTest, StopStringsCutTheTextAndNothingTheyCutIsStreamed) {
  EngineOptions o;
  o.parallel = 2;
  Engine engine(*model_, tok_, o);
  const std::string full = drain(*engine.submit(job_of(tok_, "Stop here", 60, 5))).text;
  ASSERT_GE(full.size(), 30u);
  // A stop string of three tokens (the byte vocabulary: one token per byte) from the middle.
  const std::string stop = full.substr(12, 3);
  const size_t cut = full.find(stop);
  CompletionJob j = job_of(tok_, "Stop here", 60, 5);
  j.stop = {"\x01\x02\x03never", stop};
  const Result r = drain(*engine.submit(j));
  EXPECT_EQ(r.finish, "stop");
  EXPECT_EQ(r.text, full.substr(0, cut));
  // A stop string never completed: its prefixes are held back while they may start it, then
  // streamed; the whole text arrives.
  CompletionJob h = job_of(tok_, "Stop here", 60, 5);
  h.stop = {full.substr(20, 2) + "\xff\xfe"};
  const Result all = drain(*engine.submit(h));
  EXPECT_EQ(all.finish, "length");
  EXPECT_EQ(all.text, full);
  // End-of-text is no stop string here (the byte vocabulary has none): max_tokens 0 gives nothing.
  const Result none = drain(*engine.submit(job_of(tok_, "x", 0, 1)));
  EXPECT_EQ(none.finish, "length");
  EXPECT_EQ(none.text, "");
}

// The byte vocabulary at temperature 1.5 samples bytes above 0x7F often, so that well-formed
// multi-byte characters turn up: no event boundary falls inside one (stray bytes that start no
// character are passed on as they come).
TEST_F(ServeEngineTest, StreamedTextIsNeverCutInsideAUtf8Character) {
  EngineOptions o;
  o.parallel = 4;
  Engine engine(*model_, tok_, o);
  int64_t characters = 0;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    CompletionJob j = job_of(tok_, "\xc3\xa9t\xc3\xa9", 80, seed, 1.5);
    j.sampler.top_p = 1;
    const Result r = drain(*engine.submit(j));
    // Where each well-formed multi-byte character starts and ends.
    std::vector<int> inside(r.text.size() + 1, 0);  // 1 at a byte position strictly inside one
    for (size_t i = 0; i < r.text.size();) {
      const int len = utf8_char_length(std::string_view(r.text).substr(i));  // core/utf8.h
      if (len <= 1) {  // ASCII, a stray byte, or an unfinished character at the very end
        ++i;
        continue;
      }
      ++characters;
      for (int k = 1; k < len; ++k) inside[i + static_cast<size_t>(k)] = 1;
      i += static_cast<size_t>(len);
    }
    size_t at = 0;
    for (const auto& piece : r.pieces) {
      at += piece.size();
      EXPECT_EQ(inside[at], 0) << "seed " << seed << ": an event ends inside a character at byte " << at;
    }
  }
  EXPECT_GE(characters, 5);  // the check saw characters to cut
}

// run_on_caller: the loop runs where the caller runs it (tformer serve: on the thread that loaded
// the model), until stop(); the results are the same.
TEST_F(ServeEngineTest, TheLoopCanRunOnTheCallersThread) {
  EngineOptions o;
  o.parallel = 2;
  o.prefill_chunk = 8;
  Engine own(*model_, tok_, o);
  const std::string want = drain(*own.submit(job_of(tok_, "On my thread", 30, 21))).text;
  o.run_on_caller = true;
  Engine engine(*model_, tok_, o);
  auto s = engine.submit(job_of(tok_, "On my thread", 30, 21));  // queued before the loop runs
  std::thread caller([&] { engine.run(); });
  EXPECT_EQ(drain(*s).text, want);
  engine.stop();
  caller.join();                   // run() returns after stop()
  EXPECT_THROW(own.run(), Error);  // that one's loop has its own thread
}

// Sixteen short prompts waiting when a step begins prefill together: in forwards of at most
// prefill_chunk token rows (here 160, padding included: past the 128 rows from which a float32
// product outside RowIndependentProducts would take the sgemm), each request's text and
// log-probabilities those of its run alone.
TEST_F(ServeEngineTest, ShortPromptsWaitingTogetherPrefillInOneForwardWithTheirSoloBits) {
  EngineOptions o;
  o.parallel = 16;
  o.prefill_chunk = 160;
  auto job = [&](int i) {
    CompletionJob j = job_of(tok_, std::string(static_cast<size_t>(3 + (7 * i) % 13), char('A' + i)), 12 + i,
                             static_cast<uint64_t>(40 + i));
    j.top_logprobs = 2;
    return j;
  };
  std::vector<Result> solo;
  {
    Engine one(*model_, tok_, o);
    for (int i = 0; i < 16; ++i) solo.push_back(drain(*one.submit(job(i))));
    EXPECT_EQ(one.metrics().max_prefill_batch, 1);
  }
  o.run_on_caller = true;
  Engine engine(*model_, tok_, o);
  std::vector<std::shared_ptr<Stream>> streams;
  for (int i = 0; i < 16; ++i) streams.push_back(engine.submit(job(i)));  // all waiting before the loop runs
  std::thread caller([&] { engine.run(); });
  for (int i = 0; i < 16; ++i) {
    SCOPED_TRACE(i);
    const Result r = drain(*streams[static_cast<size_t>(i)]);
    EXPECT_EQ(r.text, solo[static_cast<size_t>(i)].text);
    ASSERT_EQ(r.logprobs.size(), solo[static_cast<size_t>(i)].logprobs.size());
    for (size_t k = 0; k < r.logprobs.size(); ++k) {
      EXPECT_EQ(r.logprobs[k].logprob, solo[static_cast<size_t>(i)].logprobs[k].logprob);  // exact
      EXPECT_EQ(r.logprobs[k].top, solo[static_cast<size_t>(i)].logprobs[k].top);
    }
  }
  const auto m = engine.metrics();
  engine.stop();
  caller.join();
  // Prompts of 3 to 15 tokens: at most 160 rows a step, padding included, so 10 to 16 of them
  // together where the model's short chunks share a forward.
  if (model_->row_independent_below() > 16) {
    EXPECT_GE(m.max_prefill_batch, 10);
  } else {
    EXPECT_EQ(m.max_prefill_batch, 1);
  }
  // The loop's own counters: every prompt token prefilled once (padding not counted); a decode row
  // for every token drawn but each sequence's last (which ends it and is not fed back); the
  // phases' times within the steps'.
  uint64_t prompt_tokens = 0;
  for (int i = 0; i < 16; ++i) prompt_tokens += job(i).prompt.size();
  EXPECT_EQ(m.prefill_rows, prompt_tokens);
  EXPECT_EQ(m.completion_tokens, m.decode_rows + 16);
  EXPECT_LE(m.prefill_steps, 16u);
  EXPECT_GE(m.steps, m.decode_steps);
  EXPECT_GE(m.decode_steps * 16, m.decode_rows);
  EXPECT_GT(m.decode_seconds, 0);
  EXPECT_GT(m.prefill_seconds, 0);
  EXPECT_GT(m.sample_seconds, 0);
  EXPECT_GE(m.step_seconds * (1 + 1e-12), m.sample_seconds + m.decode_seconds + m.prefill_seconds);
}

// Prompts of several chunks beside short ones, all waiting when the loop starts: a 17-token prompt
// at --prefill-chunk 16 ends on a one-token chunk, which must not be padded into a wider group (the
// one-token forward takes attention's decode kernel, a wider one its tiled kernel); a prompt of 33
// (16 + 16 + 1) likewise; two samples of one prompt whose leader prefills in a group. Each text
// and its log-probabilities equal the request alone, and the text equals generate()'s with the same
// prefill chunk.
TEST_F(ServeEngineTest, MultiChunkPromptsBesideShortOnesKeepTheirSoloBits) {
  EngineOptions o;
  o.parallel = 8;
  o.prefill_chunk = 16;
  const std::vector<std::string> prompts = {
      "Seventeen tokens!", "abc", "Thirty-three tokens of a prompt!!", "defgh", "ij", "klmnopq"};
  auto job = [&](size_t i) {
    CompletionJob j = job_of(tok_, prompts[i], 10, static_cast<uint64_t>(70 + i));
    j.top_logprobs = 2;
    return j;
  };
  ASSERT_EQ(job(0).prompt.size(), 17u);  // (the byte vocabulary: one id a byte)
  ASSERT_EQ(job(2).prompt.size(), 33u);
  std::vector<Result> solo;
  Result solo_second;
  {
    Engine one(*model_, tok_, o);
    for (size_t i = 0; i < prompts.size(); ++i) solo.push_back(drain(*one.submit(job(i))));
    CompletionJob second = job(3);
    second.sampler.seed += 1;
    solo_second = drain(*one.submit(second));
  }
  for (size_t i : {0, 2}) {  // generate() with the same chunk
    GenerateOptions g;
    g.max_new_tokens = 10;
    g.sampler = job(i).sampler;
    g.prefill_chunk = 16;
    EXPECT_EQ(solo[i].text, tok_.decode(generate(*model_, {job(i).prompt}, g)[0])) << prompts[i];
  }
  o.run_on_caller = true;
  Engine engine(*model_, tok_, o);
  std::vector<std::shared_ptr<Stream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (i == 3) {
      auto two = engine.submit_samples(job(3), 2);  // the leader and a follower
      ASSERT_EQ(two.size(), 2u);
      streams.push_back(two[0]);
      streams.push_back(two[1]);
    } else {
      streams.push_back(engine.submit(job(i)));
    }
  }
  std::thread caller([&] { engine.run(); });
  std::vector<Result> got;
  for (auto& st : streams) got.push_back(drain(*st));
  const auto m = engine.metrics();
  engine.stop();
  caller.join();
  std::vector<const Result*> want;
  for (size_t i = 0; i < prompts.size(); ++i) {
    want.push_back(&solo[i]);
    if (i == 3) want.push_back(&solo_second);
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i].text, want[i]->text);
    ASSERT_EQ(got[i].logprobs.size(), want[i]->logprobs.size());
    for (size_t k = 0; k < got[i].logprobs.size(); ++k)
      EXPECT_EQ(got[i].logprobs[k].logprob, want[i]->logprobs[k].logprob);  // exact
  }
  if (model_->row_independent_below() > 16) {
    EXPECT_GE(m.max_prefill_batch, 2);  // (16 rows: "abc" with "defgh" and "ij", say)
  }
}

TEST_F(ServeEngineTest, LimitsCancellationAndShutdown) {
  EngineOptions o;
  o.parallel = 1;
  o.max_queue = 1;
  o.context = 64;
  o.step_delay_ms = 5;  // 60 tokens take 300 ms: the cancellation and the shutdown come mid-stream
  auto engine = std::make_unique<Engine>(*model_, tok_, o);
  // A job that cannot fit its slot is refused, naming both numbers.
  EXPECT_ERROR(engine->submit(job_of(tok_, "0123456789", 60, 1)), ErrorKind::BadInput, "max_tokens", "70", "64 tokens");
  CompletionJob bad = job_of(tok_, "x", 1, 1);
  bad.prompt = {300};
  EXPECT_ERROR(engine->submit(bad), ErrorKind::BadInput, "prompt", "outside the vocabulary");
  // One running (its first text has come), one queued, the third refused: the queue holds one.
  auto running = engine->submit(job_of(tok_, "run", 60, 2));
  std::vector<Stream::Event> first;
  ASSERT_TRUE(running->wait(first, 30000));
  auto queued = engine->submit(job_of(tok_, "wait", 10, 3));
  ASSERT_TRUE(queued);
  EXPECT_FALSE(engine->submit(job_of(tok_, "no room", 10, 4)));
  EXPECT_EQ(engine->metrics().rejected, 1u);
  // The queued one is cancelled before it runs: it never runs. The running one is cancelled
  // within a step: its stream ends with an error.
  queued->cancel();
  const uint64_t steps_at_cancel = engine->metrics().steps;  // (steps finished)
  const int64_t tokens_at_cancel = running->completion_tokens;
  running->cancel();
  const Result r = drain(*running, std::move(first));
  // Within one step: the step under way when it was cancelled may draw one more token; the next
  // retires it (so at most two steps end between the cancel and its error event).
  EXPECT_LE(engine->metrics().steps - steps_at_cancel, 2u);
  EXPECT_LE(running->completion_tokens - tokens_at_cancel, 1);
  EXPECT_NE(r.error.find("cancelled"), std::string::npos);
  EXPECT_LT(running->completion_tokens, 60);
  for (int i = 0; i < 100 && engine->metrics().cancelled < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine->metrics().cancelled, 2u);
  EXPECT_EQ(queued->completion_tokens, 0);
  // The server keeps serving.
  EXPECT_EQ(drain(*engine->submit(job_of(tok_, "after", 5, 6))).finish, "length");
  // Shutdown ends the running and the queued with an error event.
  auto a = engine->submit(job_of(tok_, "long", 60, 7));
  std::vector<Stream::Event> started;
  ASSERT_TRUE(a->wait(started, 30000));
  auto b = engine->submit(job_of(tok_, "queued", 5, 8));
  engine->stop();
  EXPECT_NE(drain(*a, std::move(started)).error.find("shutting down"), std::string::npos);
  ASSERT_TRUE(b);
  EXPECT_NE(drain(*b).error.find("shutting down"), std::string::npos);
  EXPECT_FALSE(engine->submit(job_of(tok_, "late", 5, 9)));
  engine.reset();
}

}  // namespace
}  // namespace tformer
