// Training: one session's steps (micro-batches -> gradient accumulation -> clipping -> AdamW),
// evaluation, atomic checkpoints and exact resumption. Nothing here prints: the loop that runs a
// session to the end, evaluating, checkpointing, logging metrics.jsonl and showing progress, is the
// command's (cli/train_run.h).
//
//   DIR/model.safetensors        the model (config + tokenizer in the header), loadable by every command
//   DIR/checkpoint.safetensors   the model's tensors, the AdamW moments ("optimizer.m.<name>",
//                                "optimizer.v.<name>") and, in __metadata__, "config", "tokenizer" and
//                                "train_state" (JSON: step, optimizer steps, the data sampler's RNG
//                                state, every training option)
//   DIR/metrics.jsonl            one {"step", "train_loss", "val_loss", "lr", "grad_norm",
//                                "tokens_per_s", "elapsed_s"} per evaluation
//   DIR/tokens-*.bin             the token cache (train/data.h)
//
// Determinism: everything random is a function of --seed: the initial weights, the sampler of
// training windows (whose RNG state the checkpoint saves), the dropout masks (seeded by the step
// and micro-batch index), the evaluation windows (seeded by the step). A resumed run therefore
// continues bit for bit as the uninterrupted one at the same thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/comm.h"
#include "train/data.h"
#include "train/graph.h"
#include "train/optimizer.h"

namespace tformer {

// Every setting of a run (the flags of `tformer train`), saved in the checkpoint.
struct TrainOptions {
  std::string data, val_data, tokenizer = "char", config, out;
  std::string
      init_from;  // a model file (.safetensors or .gguf) whose weights, config and tokenizer a fresh run starts from
  double val_fraction = 0.1;
  int64_t steps = 2000, batch = 12, context = 0 /* 0: the config's context_length */, grad_accum = 1;
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup = 100, decay_steps = 0 /* 0: --steps */;
  double beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.1, grad_clip = 1.0;
  int64_t eval_every = 250, eval_steps = 20, checkpoint_every = 0 /* 0: --eval-every */, log_every = 10;
  uint64_t seed = 1337;
  int threads = 0;
  std::string attention = "tiled";
  int zero = 0;  // 1: AdamW's moments sharded across the processes of mpirun (ZeRO-1)
  // 1: under mpirun, reduce the gradient layer by layer during the last micro-batch's backward
  // (without --zero 1, when each process holds a power-of-two number of micro-batches); the same
  // bits either way.
  int overlap = 1;

  nlohmann::json to_json() const;
  // Unknown keys are errors naming the key.
  static TrainOptions from_json(const nlohmann::json& j, const std::string& source);
  // Range checks with messages naming the flag.
  void validate() const;
};

struct StepResult {
  double loss = 0;       // mean over the micro-batches
  double grad_norm = 0;  // before clipping
  double lr = 0;
};

struct EvalResult {
  double train_loss = 0;
  double val_loss = 0;  // NaN when there is no validation split
};

// A node of the micro-batch accumulation tree (TrainSession::step): the sum of the micro-batches
// [start, start + 2^level).
struct AccumulationNode {
  int64_t start;
  int level;
};

class TrainSession {
 public:
  // A fresh run: the model initialised with GPT-2's scheme from options.seed. config must have
  // vocab_size equal to the tokenizer's.
  TrainSession(TrainOptions options, const ModelConfig& config, std::unique_ptr<Tokenizer> tokenizer, Dataset data);

  // Replaces the freshly initialised weights with `from`'s (fine-tuning): its config must equal
  // this session's. Only before the first step.
  void init_weights_from(Model& from);

  // One optimizer step: grad_accum forward/backward passes, clipping, AdamW. A non-finite loss
  // or gradient throws Error naming the step and the first offending tensor (nothing is updated).
  //
  // The K = grad_accum micro-batch gradients g_0 .. g_{K-1} (each of (1/K) x its mean loss) are
  // summed in one fixed tree, so that the sum does not depend on where each g_m was computed (the
  // distributed issue: N processes computing K / N micro-batches each give the same bits): leaves
  // are combined like a binary counter, each new g_m merged with the node to its left while the two
  // have the same size, so that the nodes are the aligned blocks of 1, 2, 4, ... micro-batches; the
  // nodes left at the end (one per binary digit of K, largest first) are folded from the right. For
  // K = 4: (g0 + g1) + (g2 + g3); K = 6: ((g0 + g1) + (g2 + g3)) + (g4 + g5); K = 7:
  // ((g0 + g1) + (g2 + g3)) + ((g4 + g5) + g6). It holds at most floor(log2 K) gradient buffers
  // beside the gradient (allocated at the first step that needs them).
  //
  // Under mpirun (N = Comm::world().size() > 1, K a multiple of N), process r computes the
  // micro-batches [r K / N, (r + 1) K / N) and the processes combine their nodes of the same tree
  // (reduce_gradients): the loss, the gradient and so the weights are those of one process, bit
  // for bit, on every process.
  StepResult step();
  // The gradient of the last step, after clipping (tests).
  const Arena& gradients() const { return grads_; }
  // Mean loss over eval_steps random batches of each split, drawn with an RNG seeded by
  // (seed, step): the same batches whenever the evaluation runs at this step.
  EvalResult evaluate();

  // Atomic (core/file_io.h).
  void save_checkpoint(const std::string& path);
  void save_model(const std::string& path);
  // save_checkpoint(checkpoint_path), then save_model(model_path); but when an update made a weight
  // non-finite, an Error naming the step and the tensor instead, with both files left as they were.
  void save_run(const std::string& checkpoint_path, const std::string& model_path);
  // Restores weights, moments, step and sampler from a checkpoint written by save_checkpoint for
  // this config; errors name the file and tensor.
  void load_checkpoint(const std::string& path);

  int64_t current_step() const { return step_; }  // optimizer steps done
  Model& model() { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // A chat template (GGUF's tokenizer.chat_template) the saved model and checkpoints carry along.
  void set_chat_template(std::string t) { chat_template_ = std::move(t); }
  const std::string& chat_template() const { return chat_template_; }
  const TrainOptions& options() const { return options_; }
  TrainOptions& mutable_options() { return options_; }
  const Dataset& data() const { return data_; }
  int64_t tokens_per_step() const { return options_.batch * context_ * options_.grad_accum; }
  // Seconds the steps so far spent waiting for communication: the collectives, less what the
  // reduction overlapped with the backward pass hid.
  double exposed_comm_seconds() const { return exposed_comm_seconds_; }
  // Whether the steps overlap the reduction with the backward pass: under mpirun with --overlap 1,
  // without --zero 1, and when each process holds a power-of-two number of micro-batches (its
  // block is then one node of the tree, final only during the last backward).
  bool overlapping() const;

 private:
  TrainOptions options_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string chat_template_;
  Dataset data_;
  int64_t context_;
  Arena grads_;
  std::vector<std::unique_ptr<Arena>> partials_;  // the accumulation tree's other buffers (step())
  std::vector<AccumulationNode> tree_nodes_;      // its open nodes
  std::vector<double> micro_losses_;              // this process's micro-batches' losses, in order
  Comm* comm_ = nullptr;                          // the processes of the run (one unless mpirun)
  std::vector<float> send_buf_, recv_buf_;        // reduce_gradients' (allocated at the first step)
  // The tree across the processes for the part [off[0], off[N]) of the gradient, cut at off into
  // the N parts the processes reduce; gather: then every part to every process.
  void reduce_gradients(int64_t per, const std::vector<int64_t>& off, bool gather);
  // Where each layer's gradient starts in the buffer, and where the head's (final norm, output)
  // starts: the backward finishes the buffer from the end towards the start (overlap).
  std::vector<int64_t> layer_begin_;
  int64_t head_begin_ = 0;
  double exposed_comm_seconds_ = 0;  // communication the steps waited for (not hidden by overlap)
  double overlapped_backward(Arena& leaf, float scale, int64_t per);
  // The N slices of the parameter buffer the processes own (reduce_gradients' and ZeRO-1's): slice
  // q is [slice_offsets_[q], slice_offsets_[q + 1]), aligned to the norm's pieces (kNormPiece).
  std::vector<int64_t> slice_offsets_;
  bool zero_sharded() const { return opt_->sharded(); }
  double sharded_grad_norm();  // ZeRO-1: the global norm from each process's slice
  // The moments' tensors from the optimizer, or (ZeRO-1, save_run) each filled by gather(moment
  // 1 = m or 2 = v, the tensor's entry, its numel floats) as the writer reaches it.
  using MomentSource = std::function<void(int, const Arena::Entry&, float*)>;
  void save_checkpoint(const std::string& path, const MomentSource* gather);
  std::unique_ptr<AdamW> opt_;
  std::unique_ptr<TrainGraph<float>> graph_;
  std::unique_ptr<BatchSampler> sampler_;
  std::vector<TokenId> inputs_, targets_;
  int64_t step_ = 0;
};

// Builds the tokenizer --tokenizer names: "char" = the distinct bytes of the training (and
// validation) text, sorted (nanoGPT's shakespeare_char alphabet); otherwise anything
// tokenizer_by_name_or_model accepts (bpe:CODES, byte-bpe:VOCAB, gpt2, a tokenizer JSON, a model file).
std::unique_ptr<Tokenizer> training_tokenizer(const TrainOptions& options);

}  // namespace tformer
