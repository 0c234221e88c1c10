/* Configuration and logging seen from C: the log parameters, the log level
 * from the environment, and a configuration file's parameter defaults.
 * Usage: config_log MODE [ARG]
 *   param PATH   log to PATH (EnvLogfilePath) at INFO, open and close the driver
 *   dir DIR      log to DIR/hipfile.PID.log (LogDir) at INFO, open and close the driver
 *   open         open and close the driver (the environment sets logging)
 *   batchsize N  the IOBatchsize parameter reads back N (a configuration file
 *                set it); a Set call still wins over the file
 * Prints "pid P" first, then one "FAIL ..." line per failed check; exits 1 on failure. */
#include "hipfile.h"
#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void open_close(void) {
    hipFileError_t e = hipFileDriverOpen();
    CHECK(e.err == hipFileSuccess, "DriverOpen %d", e.err);
    e = hipFileDriverClose();
    CHECK(e.err == hipFileSuccess, "DriverClose %d", e.err);
}

int main(int argc, char **argv) {
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    if (argc < 2) return 2;
    if (strcmp(argv[1], "param") == 0 && argc == 3) {
        hipFileError_t e = hipFileSetParameterString(hipFileParamEnvLogfilePath, argv[2]);
        CHECK(e.err == hipFileSuccess, "Set EnvLogfilePath %d", e.err);
        e = hipFileSetParameterString(hipFileParamLoggingLevel, "INFO");
        CHECK(e.err == hipFileSuccess, "Set LoggingLevel %d", e.err);
        open_close();
    } else if (strcmp(argv[1], "dir") == 0 && argc == 3) {
        hipFileError_t e = hipFileSetParameterString(hipFileParamLogDir, argv[2]);
        CHECK(e.err == hipFileSuccess, "Set LogDir %d", e.err);
        e = hipFileSetParameterString(hipFileParamLoggingLevel, "INFO");
        CHECK(e.err == hipFileSuccess, "Set LoggingLevel %d", e.err);
        open_close();
    } else if (strcmp(argv[1], "open") == 0) {
        open_close();
    } else if (strcmp(argv[1], "batchsize") == 0 && argc == 3) {
        size_t want = (size_t)strtoul(argv[2], NULL, 10), v = 0;
        hipFileError_t e = hipFileGetParameterSizeT(hipFileParamPropertiesIOBatchsize, &v);
        CHECK(e.err == hipFileSuccess && v == want, "file's IOBatchsize: %zu, want %zu", v, want);
        e = hipFileSetParameterSizeT(hipFileParamPropertiesIOBatchsize, 16);
        CHECK(e.err == hipFileSuccess, "Set IOBatchsize %d", e.err);
        e = hipFileDriverOpen();
        CHECK(e.err == hipFileSuccess, "DriverOpen %d", e.err);
        hipFileDriverProps_t props;
        e = hipFileDriverGetProperties(&props);
        CHECK(e.err == hipFileSuccess && props.max_batch_io_count == 16,
              "parameter over file: max_batch_io_count %u", props.max_batch_io_count);
        e = hipFileDriverClose();
        CHECK(e.err == hipFileSuccess, "DriverClose %d", e.err);
        /* The final close resets parameters to their defaults: the file's. */
        e = hipFileGetParameterSizeT(hipFileParamPropertiesIOBatchsize, &v);
        CHECK(e.err == hipFileSuccess && v == want, "after close: %zu, want %zu", v, want);
    } else {
        return 2;
    }
    return g_fail ? 1 : 0;
}
