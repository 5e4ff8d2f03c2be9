/* SPDX-License-Identifier: MIT */
/* The target table, ISA selection and type table. */
#include "util.h"

/* The op table's control-flow columns: what the validator and the emitter
 * read instead of lists of opcodes of their own. */
static void op_table(void)
{
    for (unsigned op = 0; op < OP_COUNT; op++) {
        unsigned f = pg_op_flags((pg_opcode)op);
        bool term = op == OP_BRA || op == OP_RET || op == OP_EXIT;
        bool lane = op == OP_ATOM || op == OP_SHFL || op == OP_VOTE || op == OP_LDMATRIX ||
                    op == OP_MBAR_TRY_WAIT || op == OP_ELECT || op == OP_WGMMA;
        REQUIRE_INT_EQ(!!(f & OPF_TERM), term);
        REQUIRE_INT_EQ(!!(f & OPF_LANE_VARYING), lane);
        REQUIRE_INT_EQ(!!(f & OPF_BARRIER),
                       op == OP_BAR || op == OP_BAR_N || op == OP_BAR_ARRIVE);
        /* the arch-only rows: wgmma on sm_90a alone, setmaxnreg on any "a" */
        bool wg = op == OP_WGMMA || op == OP_WGMMA_FENCE || op == OP_WGMMA_COMMIT ||
                  op == OP_WGMMA_WAIT;
        REQUIRE_INT_EQ(!!(f & OPF_ARCH_90A), wg);
        REQUIRE_INT_EQ(!!(f & OPF_ARCH_A), op == OP_SETMAXNREG);
        REQUIRE_INT_EQ(!!(f & OPF_ALIGNED), wg || op == OP_SETMAXNREG || op == OP_STMATRIX);
        /* an op written from the table with typed operands takes some type */
        unsigned form = pg_op_table[op].form;
        if (form != TX_CUSTOM && form != TX_NONE && form != TX_FMT)
            REQUIRE(pg_op_table[op].classes != 0);
        /* a format exactly where the form says so */
        REQUIRE_INT_EQ(form == TX_FMT, pg_op_table[op].fmt != NULL);
        REQUIRE(pg_op_table[op].min_sm >= 70 && pg_op_table[op].min_isa >= 60);
    }
    REQUIRE_INT_EQ(pg_type_tc(PG_U8), TC_8BIT);
    REQUIRE_INT_EQ(pg_type_tc(PG_B32), TC_BIT);
    REQUIRE_INT_EQ(pg_type_tc(PG_TYPE_COUNT), 0);
}

/* The type table's rows against the public type list, and the columns
 * the builder and the formatter read from it inline. */
static void type_table(void)
{
    static const struct { const char *name; unsigned bits; } want[PG_TYPE_COUNT] = {
#define PG_X_(e, name, bits) {name, bits},
        PG_TYPE_MAP(PG_X_)
#undef PG_X_
    };
    for (unsigned t = 0; t < PG_TYPE_COUNT; t++) {
        const pg_type_info *ti = pg_type_row((pg_type)t);
        REQUIRE_STR_EQ(ti->name, want[t].name);
        REQUIRE_INT_EQ(ti->name_len, strlen(want[t].name));
        REQUIRE_INT_EQ(ti->bits, want[t].bits);
        char c = want[t].name[0];
        REQUIRE_INT_EQ(ti->is_float, c == 'f' || t == PG_BF16);
        REQUIRE_INT_EQ(ti->is_signed, c == 's');
        REQUIRE_INT_EQ(ti->is_bits, c == 'b' && t != PG_B8 && t != PG_BF16);
        /* a register class for every type a register can have */
        REQUIRE_INT_EQ(ti->cls == RC_COUNT, want[t].bits == 8);
    }
}

int main(void)
{
    type_table();
    static const struct { const char *name; unsigned sm, isa; } want[] = {
        {"sm_70", 70, 60},   {"sm_75", 75, 63},   {"sm_80", 80, 70},  {"sm_86", 86, 71},
        {"sm_87", 87, 74},   {"sm_89", 89, 78},   {"sm_90", 90, 78},  {"sm_90a", 90, 80},
        {"sm_100", 100, 86}, {"sm_100a", 100, 86}, {"sm_120", 120, 87}, {"sm_120a", 120, 87},
        {"sm_121", 121, 88},
    };
    REQUIRE_INT_EQ(PG_TARGET_COUNT, sizeof want / sizeof want[0]);
    for (unsigned i = 0; i < PG_TARGET_COUNT; i++) {
        pg_target t;
        REQUIRE_INT_EQ(pg_target_parse(want[i].name, &t), 0);
        REQUIRE_INT_EQ(t, i);
        REQUIRE_STR_EQ(pg_target_name(t), want[i].name);
        REQUIRE_INT_EQ(pg_target_sm(t), want[i].sm);
        REQUIRE_INT_EQ(pg_target_min_isa(t), want[i].isa);
        REQUIRE(pg_isa_min_driver(want[i].isa) != 0);
        /* an empty kernel gets exactly the target's minimum ISA */
        pg_kernel *k = mk("empty", t);
        const char *ptx;
        REQUIRE_INT_EQ(emit(k, &ptx), 0);
        char line[64];
        snprintf(line, sizeof line, ".version %u.%u\n.target %s\n", want[i].isa / 10,
                 want[i].isa % 10, want[i].name);
        REQUIRE_CONTAINS(ptx, line);
        pg_kernel_destroy(&k);
    }
    pg_target t;
    REQUIRE_INT_EQ(pg_target_parse("sm_91", &t), PG_ENOTFOUND);
    REQUIRE_INT_EQ(pg_target_parse("SM_90", &t), PG_ENOTFOUND);
    REQUIRE_INT_EQ(pg_target_parse(NULL, &t), PG_EINVAL);
    REQUIRE(pg_target_name(PG_TARGET_COUNT) == NULL);
    REQUIRE(pg_target_is_arch_specific(PG_SM_90A));
    REQUIRE(!pg_target_is_arch_specific(PG_SM_90));
    REQUIRE(!pg_target_is_arch_specific(PG_TARGET_COUNT));
    /* the column says what the name says: an "a" target */
    for (unsigned i = 0; i < PG_TARGET_COUNT; i++) {
        const char *n = pg_target_name((pg_target)i);
        REQUIRE_INT_EQ(pg_target_is_arch_specific((pg_target)i), n[strlen(n) - 1] == 'a');
    }
    REQUIRE_INT_EQ(pg_isa_min_driver(78), 11080);
    REQUIRE_INT_EQ(pg_isa_min_driver(87), 12080);
    REQUIRE_INT_EQ(pg_isa_min_driver(88), 12090);
    REQUIRE_INT_EQ(pg_isa_min_driver(99), 0);

    /* the ISA is raised by an instruction that needs more than the target */
    pg_kernel *k = mk("raise", PG_SM_70);
    pg_reg h = pg_reg_new(k, PG_F16);
    pg_cvt(k, PG_F16, PG_F32, PG_RND_RN, h, pg_f32(1.5f));
    REQUIRE_INT_EQ(pg_kernel_isa(k), 60);
    pg_abs(k, PG_F16, h, h);
    REQUIRE_INT_EQ(pg_kernel_isa(k), 65);
    const char *ptx;
    REQUIRE_INT_EQ(emit(k, &ptx), 0);
    REQUIRE_CONTAINS(ptx, ".version 6.5\n.target sm_70\n");
    pg_kernel_destroy(&k);

    /* types */
    REQUIRE_INT_EQ(pg_type_bits(PG_BF16), 16);
    REQUIRE_INT_EQ(pg_type_bits(PG_PRED), 1);
    REQUIRE_STR_EQ(pg_type_name(PG_S64), "s64");
    pg_type ty;
    REQUIRE_INT_EQ(pg_type_parse("f64", &ty), 0);
    REQUIRE_INT_EQ(ty, PG_F64);
    REQUIRE_INT_EQ(pg_type_parse("f128", &ty), PG_ENOTFOUND);
    REQUIRE(pg_type_is_float(PG_BF16) && !pg_type_is_float(PG_U32));
    REQUIRE(pg_type_is_signed(PG_S8) && !pg_type_is_signed(PG_U8));

    /* every scalar type as a kernel param */
    k = mk("params", PG_SM_90);
    pg_param ps[PG_TYPE_COUNT];
    for (int i = PG_B8; i < PG_TYPE_COUNT; i++) {
        char name[16];
        snprintf(name, sizeof name, "p_%s", pg_type_name((pg_type)i));
        ps[i] = pg_param_add(k, (pg_type)i, name);
        REQUIRE(ps[i].id != 0);
    }
    for (int i = PG_B8; i < PG_TYPE_COUNT; i++)
        (void)pg_param_load(k, ps[i]);
    REQUIRE_INT_EQ(pg_kernel_param_count(k), PG_TYPE_COUNT - 1);
    REQUIRE_INT_EQ(emit(k, &ptx), 0);
    REQUIRE_CONTAINS(ptx, "\t.param .b8 p_b8,\n");
    REQUIRE_CONTAINS(ptx, "\t.param .b16 p_bf16,\n");
    REQUIRE_CONTAINS(ptx, "\tld.param.s8 %rs");
    REQUIRE_CONTAINS(ptx, "\tld.param.f64 %fd1, [p_f64];\n");
    const char *pname;
    pg_type ptype;
    REQUIRE_INT_EQ(pg_kernel_param_info(k, 0, &pname, &ptype), 0);
    REQUIRE_STR_EQ(pname, "p_b8");
    REQUIRE_INT_EQ(pg_kernel_param_info(k, 99, &pname, &ptype), PG_ERANGE);
    pg_kernel_destroy(&k);
    op_table();
    TEST_DONE();
}
