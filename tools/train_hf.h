/* SPDX-License-Identifier: MIT */
/* ptxgen-train --model: LoRA fine-tuning of a Hugging Face checkpoint. */
#ifndef PTXGEN_TRAIN_HF_H
#define PTXGEN_TRAIN_HF_H

#include "ptxgen/pgrt_lm.h"

#include <stdint.h>

/* The whole command (argv as main's); returns the exit status: 0, 1 on a
 * failure of the run, 2 on bad input (one line on stderr), 130 and 143
 * after SIGINT and SIGTERM (a checkpoint written first). */
int train_hf_main(int argc, char **argv);

/* pgrt_last_message() as one printable line: the model layer's messages
 * are escaped already and pass as they are; another (a driver's, which
 * may quote $PGRT_LIBCUDA or hold a JIT log's line ends) is escaped with
 * pg_text_escape. The text lives until the next call on the thread. */
const char *train_last_message(void);

/* --profile's lines: the time split by kind and each kernel's time a
 * step (st->kernels sorted, largest first), over steps optimizer steps. */
void train_print_profile(pgrt_lm_stats *st, uint64_t steps);

#endif
