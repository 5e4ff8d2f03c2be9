/* SPDX-License-Identifier: MIT */
/* Error codes as words, from the one table in ptxgen.h. */
#include "internal.h"

const char *pg_strerror(int err)
{
    switch (err) {
    case PG_OK:
        return "success";
#define PG_X_(name, val, msg)                                                  \
    case PG_##name:                                                            \
        return msg;
        PG_ERRNO_MAP(PG_X_)
#undef PG_X_
    }
    return "unknown error";
}

const char *pg_err_name(int err)
{
    switch (err) {
    case PG_OK:
        return "PG_OK";
#define PG_X_(name, val, msg)                                                  \
    case PG_##name:                                                            \
        return "PG_" #name;
        PG_ERRNO_MAP(PG_X_)
#undef PG_X_
    }
    return "PG_UNKNOWN";
}
