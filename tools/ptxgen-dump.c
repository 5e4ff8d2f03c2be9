/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-dump: the process around dump_main(). Everything else lives in
 * dump_cli.c so that tests and fuzz targets can call it without exec.
 */
#include "dump_cli.h"

int main(int argc, char **argv)
{
    return dump_main(argc, argv, stdout, stderr);
}
