/* SPDX-License-Identifier: MIT */
/*
 * embedding_gather_{f32,bf16}: out[t, :] = table[ids[t], :] for T token ids
 * into a [vocab, hidden] table, one block a token.
 *
 * An id outside [0, vocab) is never read through: its row of out is written
 * as zeros and bit 0 of the device error word is set (red.or, so any number
 * of bad ids in any blocks leave the same word). The caller clears the word
 * before the launch and reads it after; the other bits are left alone.
 */
#include "model.h"

#define EMB_BAD_ID 1u

static int build_gather(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    const pgk_dtype dt = (pgk_dtype)d->variant;
    (void)knobs;
    pg_kernel_set_maxntid(k, PGK_THREADS, 1, 1);
    unsigned size = pgk_dtype_size(dt);
    pg_type bits = dt == PGK_BF16 ? PG_U16 : PG_U32;
    pg_reg table = pg_param_load(k, p[0]);
    pg_reg ids = pg_param_load(k, p[1]);
    pg_reg out = pg_param_load(k, p[2]);
    pg_reg err = pg_param_load(k, p[3]);
    pg_reg ntok = pg_param_load(k, p[4]);
    pg_reg hidden = pg_param_load(k, p[5]);
    pg_reg vocab = pg_param_load(k, p[6]);

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg row = pg_sreg_read(k, PG_SREG_CTAID_X);
    pg_label done = pg_label_new(k, "exit");
    pg_label bad = pg_label_new(k, "bad_id");
    pg_bounds_guard(k, row, ntok, done);

    pg_reg ida = pgk_elem_addr(k, ids, row, 4);
    pg_reg id = pgv_ld_nc(k, PG_S32, ida, 0);
    pg_comment(k, "unsigned compare: a negative id is huge and fails it too");
    pg_reg ok = pgv_setp(k, PG_CMP_LO, PG_U32, id, vocab);
    pg_reg dst = pgk_addr2(k, out, row, hidden, pg_u32(0), size);
    pg_bra_if(k, ok, true, bad);

    pg_reg src = pgk_addr2(k, table, id, hidden, pg_u32(0), size);
    pg_loop L;
    pg_reg h = pg_for_begin(k, &L, tid, hidden, ntid);
    pg_reg sa = pgk_addr_add(k, src, h, size);
    pg_reg v = pgv_ld_nc(k, bits, sa, 0);
    pg_reg da = pgk_addr_add(k, dst, h, size);
    pg_st(k, PG_SPACE_GLOBAL, bits, da, 0, v);
    pg_for_end(k, &L);
    pg_bra(k, done);

    pg_label_bind(k, bad);
    pg_reg first = pgv_setp(k, PG_CMP_EQ, PG_U32, tid, pg_u32(0));
    pg_guard(k, first, false);
    pg_atom(k, PG_SPACE_GLOBAL, PG_ATOM_OR, PG_B32, pg_none(), err, 0, pg_u32(EMB_BAD_ID),
            pg_none());
    pg_reg zero = pgv_mov(k, bits, pg_u32(0));
    pg_loop Z;
    pg_reg hz = pg_for_begin(k, &Z, tid, hidden, ntid);
    pg_reg za = pgk_addr_add(k, dst, hz, size);
    pg_st(k, PG_SPACE_GLOBAL, bits, za, 0, zero);
    pg_for_end(k, &Z);

    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

static const pgk_param gather_params[] = {
    {"table", PG_U64, true},      {"ids", PG_U64, true},         {"output", PG_U64, true},
    {"error_word", PG_U64, true}, {"rows", PG_U32, false}, {"cols", PG_U32, false},
    {"vocab", PG_U32, false},
};

static const pgk_knob gather_knobs[] = {
    {"rows", 2048, 1, INT32_MAX, "token ids (one block each)"},
    {"cols", 1536, 1, INT32_MAX, "elements a table row"},
};

/* The two descriptors differ only in the element type. */
#define GATHER_SUMMARY(type)                                                                   \
    "output[t, :] = table[ids[t], :] (" type "); a bad id sets bit 0 of *error_word and "     \
    "gives a zero row"

const pgk_desc pgk_desc_embedding_gather_f32 = {
    .name = "embedding_gather_f32",
    .summary = GATHER_SUMMARY("f32"),
    PGK_PARAMS(gather_params),
    PGK_KNOBS(gather_knobs),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_gather,
    .launch = pgk_launch_rows,
    .variant = PGK_F32,
};

const pgk_desc pgk_desc_embedding_gather_bf16 = {
    .name = "embedding_gather_bf16",
    .summary = GATHER_SUMMARY("bf16"),
    PGK_PARAMS(gather_params),
    PGK_KNOBS(gather_knobs),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_gather,
    .launch = pgk_launch_rows,
    .variant = PGK_BF16,
};
