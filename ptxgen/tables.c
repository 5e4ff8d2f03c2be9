/* SPDX-License-Identifier: MIT */
#include "internal.h"

#include <string.h>

typedef struct target_info {
    const char *name;
    unsigned sm, isa;
    bool arch_specific;
} target_info;

static const target_info targets[PG_TARGET_COUNT] = {
#define PG_X_(e, name, sm, isa, arch) {name, sm, isa, arch},
    PG_TARGET_MAP(PG_X_)
#undef PG_X_
};

const char *pg_target_name(pg_target t)
{
    return (unsigned)t < PG_TARGET_COUNT ? targets[t].name : NULL;
}

int pg_target_parse(const char *name, pg_target *out)
{
    if (!name || !out)
        return PG_EINVAL;
    for (unsigned i = 0; i < PG_TARGET_COUNT; i++) {
        if (strcmp(name, targets[i].name) == 0) {
            *out = (pg_target)i;
            return PG_OK;
        }
    }
    return PG_ENOTFOUND;
}

unsigned pg_target_sm(pg_target t)
{
    return (unsigned)t < PG_TARGET_COUNT ? targets[t].sm : 0;
}

unsigned pg_target_min_isa(pg_target t)
{
    return (unsigned)t < PG_TARGET_COUNT ? targets[t].isa : 0;
}

bool pg_target_is_arch_specific(pg_target t)
{
    return (unsigned)t < PG_TARGET_COUNT && targets[t].arch_specific;
}

unsigned pg_isa_min_driver(unsigned isa)
{
    /* PTX ISA -> first CUDA release whose driver JIT loads it. */
    static const struct { unsigned isa, driver; } map[] = {
        {60, 9000},  {61, 9010},  {62, 9020},  {63, 10000}, {64, 10010},
        {65, 10020}, {70, 11000}, {71, 11010}, {72, 11020}, {73, 11030},
        {74, 11040}, {75, 11050}, {76, 11060}, {77, 11070}, {78, 11080},
        {80, 12000}, {81, 12010}, {82, 12020}, {83, 12030}, {84, 12040},
        {85, 12050}, {86, 12070}, {87, 12080}, {88, 12090}, {90, 13000},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].isa == isa)
            return map[i].driver;
    return 0;
}

const pg_type_info pg_type_table[PG_TYPE_COUNT] = {
    /*          name    len bits tc        class    float  signed bits */
    [PG_PRED] = {"pred", 4, 1, TC_PRED, RC_PRED, false, false, false},
    [PG_B8] = {"b8", 2, 8, TC_8BIT, RC_COUNT, false, false, false},
    [PG_B16] = {"b16", 3, 16, TC_BIT, RC_B16, false, false, true},
    [PG_B32] = {"b32", 3, 32, TC_BIT, RC_B32, false, false, true},
    [PG_B64] = {"b64", 3, 64, TC_BIT, RC_B64, false, false, true},
    [PG_U8] = {"u8", 2, 8, TC_8BIT, RC_COUNT, false, false, false},
    [PG_U16] = {"u16", 3, 16, TC_UINT, RC_B16, false, false, false},
    [PG_U32] = {"u32", 3, 32, TC_UINT, RC_B32, false, false, false},
    [PG_U64] = {"u64", 3, 64, TC_UINT, RC_B64, false, false, false},
    [PG_S8] = {"s8", 2, 8, TC_8BIT, RC_COUNT, false, true, false},
    [PG_S16] = {"s16", 3, 16, TC_SINT, RC_B16, false, true, false},
    [PG_S32] = {"s32", 3, 32, TC_SINT, RC_B32, false, true, false},
    [PG_S64] = {"s64", 3, 64, TC_SINT, RC_B64, false, true, false},
    [PG_F16] = {"f16", 3, 16, TC_F16, RC_H, true, false, false},
    [PG_BF16] = {"bf16", 4, 16, TC_BF16, RC_H, true, false, false},
    [PG_F32] = {"f32", 3, 32, TC_F32, RC_F32, true, false, false},
    [PG_F64] = {"f64", 3, 64, TC_F64, RC_F64, true, false, false},
};

const char *pg_type_name(pg_type t)
{
    return (unsigned)t < PG_TYPE_COUNT ? pg_type_table[t].name : NULL;
}

unsigned pg_type_bits(pg_type t)
{
    return (unsigned)t < PG_TYPE_COUNT ? pg_type_table[t].bits : 0;
}

bool pg_type_is_float(pg_type t)
{
    return (unsigned)t < PG_TYPE_COUNT && pg_type_table[t].is_float;
}

bool pg_type_is_signed(pg_type t)
{
    return (unsigned)t < PG_TYPE_COUNT && pg_type_table[t].is_signed;
}

int pg_type_parse(const char *name, pg_type *out)
{
    if (!name || !out)
        return PG_EINVAL;
    for (unsigned i = 0; i < PG_TYPE_COUNT; i++) {
        if (strcmp(name, pg_type_table[i].name) == 0) {
            *out = (pg_type)i;
            return PG_OK;
        }
    }
    return PG_ENOTFOUND;
}

const pg_op_info pg_op_table[OP_COUNT] = {
#define PG_X_(e, stem, tc, form, fmt, flags, sm, isa)                                       \
    {stem, sizeof(stem) - 1, tc, form, fmt, flags, sm, isa},
    PG_OP_MAP(PG_X_)
#undef PG_X_
};

unsigned pg_type_tc(pg_type t)
{
    return (unsigned)t < PG_TYPE_COUNT ? pg_type_table[t].tc : 0;
}

static const char *const sreg_names[PG_SREG_COUNT] = {
    "%tid.x",    "%tid.y",    "%tid.z",    "%ntid.x",   "%ntid.y",
    "%ntid.z",   "%ctaid.x",  "%ctaid.y",  "%ctaid.z",  "%nctaid.x",
    "%nctaid.y", "%nctaid.z", "%laneid",   "%warpid",
};

const char *pg_sreg_name(pg_sreg s)
{
    return (unsigned)s < PG_SREG_COUNT ? sreg_names[s] : "%invalid";
}

reg_class pg_type_class(pg_type t)
{
    return (unsigned)t < PG_TYPE_COUNT ? (reg_class)pg_type_table[t].cls : RC_COUNT;
}

const char *pg_reg_prefix(reg_class c)
{
    static const char *const p[RC_COUNT] = {"%p", "%rs", "%h", "%r", "%f", "%rd", "%fd"};
    return p[c];
}

const char *pg_reg_decl_type(reg_class c)
{
    static const char *const p[RC_COUNT] = {".pred", ".b16", ".b16", ".b32", ".f32", ".b64", ".f64"};
    return p[c];
}
