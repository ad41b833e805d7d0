// `tformer train`, the run: builds a fresh session or resumes one from its run folder, then steps it
// to --steps, evaluating (metrics.jsonl), checkpointing and showing progress (cli/progress.h). The
// training itself is train/trainer.h's TrainSession; this file decides when each thing happens and
// prints.
#pragma once

#include <string>
#include <vector>

#include "train/trainer.h"

namespace tformer::cli {

// resume_dir "" = a fresh run into options.out. `given` names the flags set on the command line
// (their JSON keys); on resume they override the options saved in the checkpoint.
void run_training(TrainOptions options, const std::string& resume_dir, const std::vector<std::string>& given);

}  // namespace tformer::cli
