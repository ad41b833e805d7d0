// tformer train: train a model on a text file (cli/train_run.h runs it, train/trainer.h trains).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/train_run.h"

namespace tformer::cli {

void register_train(CLI::App& app) {
  struct State {
    TrainOptions o;
    std::string resume;
  };
  auto st = std::make_shared<State>();
  TrainOptions& o = st->o;
  auto* c = app.add_subcommand("train", "Train a decoder on a text file (AdamW, warmup + cosine, checkpoints)");
  c->add_option("--data", o.data, "Training text file");
  auto* val_data =
      c->add_option("--val-data", o.val_data, "Validation text file (default: the last --val-fraction of --data)");
  c->add_option("--val-fraction", o.val_fraction, "Fraction at the END of --data held out for validation")
      ->capture_default_str()
      ->excludes(val_data);
  c->add_option("--tokenizer", o.tokenizer,
                "char (the data's own bytes) | bpe:CODES | byte-bpe:VOCAB | gpt2 | cl100k_base | o200k_base | "
                "tokenizer JSON | model .safetensors")
      ->capture_default_str();
  c->add_option("--config", o.config, "Model config JSON (docs/checkpoint-format.md; vocab_size from the tokenizer)");
  c->add_option("--init-from", o.init_from,
                "Start from this model's weights, config and tokenizer (.safetensors or .gguf): fine-tuning");
  c->add_option("--out", o.out, "Run folder: model.safetensors, checkpoint.safetensors, metrics.jsonl");
  c->add_option("--steps", o.steps, "Optimizer steps")->capture_default_str();
  c->add_option("--batch", o.batch, "Sequences per micro-batch")->capture_default_str();
  c->add_option("--context", o.context, "Tokens per sequence (0 = the config's context_length)")->capture_default_str();
  c->add_option("--grad-accum", o.grad_accum, "Micro-batches per optimizer step")->capture_default_str();
  c->add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
  c->add_option("--min-lr", o.min_lr, "Learning rate at the end of the cosine decay")->capture_default_str();
  c->add_option("--warmup", o.warmup, "Linear warmup steps")->capture_default_str();
  c->add_option("--decay-steps", o.decay_steps, "Step where the cosine reaches --min-lr (0 = --steps)")
      ->capture_default_str();
  c->add_option("--beta1", o.beta1, "AdamW beta1")->capture_default_str();
  c->add_option("--beta2", o.beta2, "AdamW beta2")->capture_default_str();
  c->add_option("--eps", o.eps, "AdamW epsilon")->capture_default_str();
  c->add_option("--weight-decay", o.weight_decay, "Decoupled weight decay (matrices only)")->capture_default_str();
  c->add_option("--grad-clip", o.grad_clip, "Global gradient-norm clip (0 = off)")->capture_default_str();
  c->add_option("--eval-every", o.eval_every, "Evaluate every N steps (0 = only at the end)")->capture_default_str();
  c->add_option("--eval-steps", o.eval_steps, "Random batches per split in each evaluation")->capture_default_str();
  c->add_option("--checkpoint-every", o.checkpoint_every, "Checkpoint every N steps (0 = with each evaluation)")
      ->capture_default_str();
  c->add_option("--log-every", o.log_every, "Progress line every N steps")->capture_default_str();
  c->add_option("--seed", o.seed, "Seed of the weights, data order and dropout")->capture_default_str();
  c->add_option("--threads", o.threads, "Threads (0 = all cores)")->capture_default_str();
  c->add_option("--attention", o.attention, "tiled (default) | reference (the plain kernel, for debugging)")
      ->capture_default_str();
  c->add_option("--zero", o.zero,
                "1: shard AdamW's moments across the processes of mpirun (ZeRO-1, docs/distributed.md)")
      ->capture_default_str();
  c->add_option("--overlap", o.overlap,
                "1: under mpirun, reduce the gradient layer by layer during the backward pass (the same bits; "
                "docs/distributed.md)")
      ->capture_default_str();
  c->add_option("--resume", st->resume, "Continue the run in this folder from its checkpoint");
  c->callback([st, c] {
    std::vector<std::string> given;  // JSON keys of the flags set on this command line
    for (const CLI::Option* opt : c->get_options()) {
      if (opt->count() == 0 || opt->get_lnames().empty()) continue;
      std::string key = opt->get_lnames()[0];
      std::replace(key.begin(), key.end(), '-', '_');
      given.push_back(key);
    }
    run_training(st->o, st->resume, given);
  });
}

}  // namespace tformer::cli
