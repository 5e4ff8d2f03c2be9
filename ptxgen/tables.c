/* SPDX-License-Identifier: MIT */
#include "internal.h"

#include <string.h>

typedef struct target_info {
    const char *name;
    unsigned sm, isa;
} target_info;

static const target_info targets[PG_TARGET_COUNT] = {
#define PG_X_(e, name, sm, isa) {name, sm, isa},
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
    const char *n = pg_target_name(t);
    return n && n[strlen(n) - 1] == 'a';
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

typedef struct type_info {
    const char *name;
    unsigned bits;
} type_info;

static const type_info types[PG_TYPE_COUNT] = {
#define PG_X_(e, name, bits) {name, bits},
    PG_TYPE_MAP(PG_X_)
#undef PG_X_
};

const char *pg_type_name(pg_type t)
{
    return (unsigned)t < PG_TYPE_COUNT ? types[t].name : NULL;
}

unsigned pg_type_bits(pg_type t)
{
    return (unsigned)t < PG_TYPE_COUNT ? types[t].bits : 0;
}

bool pg_type_is_float(pg_type t)
{
    return t == PG_F16 || t == PG_BF16 || t == PG_F32 || t == PG_F64;
}

bool pg_type_is_signed(pg_type t)
{
    return t == PG_S8 || t == PG_S16 || t == PG_S32 || t == PG_S64;
}

int pg_type_parse(const char *name, pg_type *out)
{
    if (!name || !out)
        return PG_EINVAL;
    for (unsigned i = 0; i < PG_TYPE_COUNT; i++) {
        if (strcmp(name, types[i].name) == 0) {
            *out = (pg_type)i;
            return PG_OK;
        }
    }
    return PG_ENOTFOUND;
}

const pg_op_info pg_op_table[OP_COUNT] = {
#define PG_X_(e, stem, tc, form, flags, sm, isa) {stem, tc, form, flags, sm, isa},
    PG_OP_MAP(PG_X_)
#undef PG_X_
};

unsigned pg_type_tc(pg_type t)
{
    switch (t) {
    case PG_PRED: return TC_PRED;
    case PG_B8: case PG_U8: case PG_S8: return TC_8BIT;
    case PG_B16: case PG_B32: case PG_B64: return TC_BIT;
    case PG_U16: case PG_U32: case PG_U64: return TC_UINT;
    case PG_S16: case PG_S32: case PG_S64: return TC_SINT;
    case PG_F16: return TC_F16;
    case PG_BF16: return TC_BF16;
    case PG_F32: return TC_F32;
    case PG_F64: return TC_F64;
    default: return 0;
    }
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
    switch (t) {
    case PG_PRED: return RC_PRED;
    case PG_B16: case PG_U16: case PG_S16: return RC_B16;
    case PG_F16: case PG_BF16: return RC_H;
    case PG_B32: case PG_U32: case PG_S32: return RC_B32;
    case PG_F32: return RC_F32;
    case PG_B64: case PG_U64: case PG_S64: return RC_B64;
    case PG_F64: return RC_F64;
    default: return RC_COUNT;
    }
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
