/* SPDX-License-Identifier: MIT */
/* ptxgen-train --model: LoRA fine-tuning of a Hugging Face checkpoint. */
#ifndef PTXGEN_TRAIN_HF_H
#define PTXGEN_TRAIN_HF_H

/* The whole command (argv as main's); returns the exit status: 0, 1 on a
 * failure of the run, 2 on bad input (one line on stderr). */
int train_hf_main(int argc, char **argv);

#endif
