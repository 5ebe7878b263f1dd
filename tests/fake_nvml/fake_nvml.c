/*
 * A fake libnvidia-ml.so.1 for tests: the REAL nvidia-ml-py binding (pynvml) dlopens it, so its
 * ctypes structs, symbol lookup (missing symbol -> FunctionNotFound) and error codes are exercised.
 *
 * Behaviour comes from a key=value file named by $FAKE_NVML_CONFIG, read at the first nvmlInit
 * (no variable -> nvmlInit fails with NVML_ERROR_DRIVER_NOT_LOADED, like a node whose driver is
 * not loaded). Keys (see tests/fake_nvml/README.md for the full list):
 *   gpus=N  driver_version=..  nvml_version=..  init_error=CODE
 *   gpu.I.uuid / name / minor / util (comma list, cycled per call) / mem_total / mem_used /
 *   mem_reserved / power_mw / energy_mj / energy_step_mj / sm_clock / temp / gpm (0|1) /
 *   sm_active / not_supported (util,mem,power,energy,clock,temp) / lost_after (device calls) /
 *   lost_when_exists (path) / lost_code / mig (0|1 mode) / max_mig
 *   gpu.I.mig.J.uuid / mem_total / mem_used / gi / sm_active (GPM via the parent, gpu.I.gpm=1)
 * Compile with -DFAKE_NO_MEMINFO_V2 to mimic a pre-510 driver without nvmlDeviceGetMemoryInfo_v2.
 *
 * Return codes, struct layouts and argument checks follow nvml.h / the NVML API reference for
 * these calls. Test-only export: fakenvml_call_count(uuid, function_name).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13, NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25, NVML_ERROR_UNKNOWN = 999,
};

typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
#define NVML_STRUCT_VERSION(type, ver) ((unsigned int)(sizeof(type##_v##ver##_t) | ((ver) << 24U)))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(nvmlMemory, 2)

/* GPM (nvml.h, R520+) */
typedef struct fake_gpm_sample *nvmlGpmSample_t;
typedef struct { char *shortName, *longName, *unit; } nvmlGpmMetricInfo_t;
typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;
#define NVML_GPM_METRIC_MAX 477
typedef struct {
    unsigned int version, numMetrics;
    nvmlGpmSample_t sample1, sample2;
    nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;
typedef struct { unsigned int version, isSupportedDevice; } nvmlGpmSupport_t;
#define NVML_GPM_METRICS_GET_VERSION 1
#define NVML_GPM_SUPPORT_VERSION 1
#define NVML_GPM_METRIC_SM_UTIL 2

enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3 };
enum { NVML_TEMPERATURE_GPU = 0 };

/* per-device call counters, by function */
enum { F_UUID, F_NAME, F_INDEX, F_MINOR, F_UTIL, F_MEM, F_MEM2, F_POWER, F_ENERGY, F_CLOCK,
       F_TEMP, F_MIGMODE, F_MAXMIG, F_MIGHANDLE, F_ISMIG, F_PARENT, F_GIID, F_GPMSUP, F_GPMGET,
       F_COUNT };
static const char *F_NAMES[F_COUNT] = {
    "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetIndex", "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetTemperature", "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", "nvmlDeviceGetGpuInstanceId",
    "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleGet",
};

#define MAX_GPUS 16
#define MAX_MIG 7
#define MAX_UTIL 16

typedef struct fake_dev {
    int present, is_mig, index, minor, gi, mig_mode, max_mig, gpm;
    char uuid[96], name[96], lost_path[256];
    unsigned util[MAX_UTIL]; int n_util;
    unsigned long long mem_total, mem_used, mem_reserved, energy_mj, energy_step_mj;
    unsigned power_mw, sm_clock, temp;
    double sm_active;
    unsigned unsupported;            /* bitmask of F_* */
    long lost_after;                 /* lost once this many calls were made on the device, -1 never */
    int lost_code, lost;
    unsigned long long calls[F_COUNT], total_calls;
    struct fake_dev *parent;
    struct fake_dev *migs[MAX_MIG];  /* by MIG slot index */
} fake_dev;

struct fake_gpm_sample { int taken; fake_dev *dev; double sm_active; };

static fake_dev g_gpus[MAX_GPUS];
static fake_dev g_migs[MAX_GPUS][MAX_MIG];
static int g_count, g_refcount, g_init_error;
static char g_driver[80] = "550.54.15", g_nvml[80] = "12.550.54.15";

static int dev_valid(const fake_dev *d) {
    const char *p = (const char *)d;
    if (p >= (const char *)g_gpus && p < (const char *)(g_gpus + MAX_GPUS)) return d->present;
    if (p >= (const char *)g_migs && p < (const char *)(g_migs + MAX_GPUS)) return d->present;
    return 0;
}

static int dev_lost(fake_dev *d) {
    if (d->lost) return 1;
    if (d->lost_after >= 0 && (long)d->total_calls > d->lost_after) d->lost = 1;
    if (d->lost_path[0] && access(d->lost_path, F_OK) == 0) d->lost = 1;
    if (!d->lost && d->parent && dev_lost(d->parent)) d->lost = 1;
    return d->lost;
}

/* Common prologue of every device call: init check, handle check, count, lost, not supported. */
static nvmlReturn_t enter(fake_dev *d, int f) {
    if (g_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (d == NULL || !dev_valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
    d->calls[f]++;
    d->total_calls++;
    if (dev_lost(d)) return d->lost_code;
    if (d->unsupported & (1u << f)) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* ---- config ---- */
static void init_defaults(fake_dev *d, int i) {
    memset(d, 0, sizeof *d);
    d->index = i; d->minor = i; d->lost_after = -1; d->lost_code = NVML_ERROR_GPU_IS_LOST;
    snprintf(d->uuid, sizeof d->uuid, "GPU-fa4e%04x-0000-4000-8000-%012x", i, i);
    snprintf(d->name, sizeof d->name, "NVIDIA A100-SXM4-80GB");
    d->util[0] = 0; d->n_util = 1;
    d->mem_total = 85899345920ULL; d->mem_reserved = 566231040ULL;
    d->power_mw = 60000; d->energy_mj = 1000000; d->sm_clock = 1410; d->temp = 30;
}

static unsigned parse_unsupported(const char *v) {
    unsigned m = 0;
    char buf[256]; snprintf(buf, sizeof buf, "%s", v);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (!strcmp(t, "util")) m |= 1u << F_UTIL;
        else if (!strcmp(t, "mem")) m |= (1u << F_MEM) | (1u << F_MEM2);
        else if (!strcmp(t, "power")) m |= 1u << F_POWER;
        else if (!strcmp(t, "energy")) m |= 1u << F_ENERGY;
        else if (!strcmp(t, "clock")) m |= 1u << F_CLOCK;
        else if (!strcmp(t, "temp")) m |= 1u << F_TEMP;
        else fprintf(stderr, "fake_nvml: unknown not_supported token '%s'\n", t);
    }
    return m;
}

static void set_field(fake_dev *d, const char *k, const char *v) {
    if (!strcmp(k, "uuid")) snprintf(d->uuid, sizeof d->uuid, "%s", v);
    else if (!strcmp(k, "name")) snprintf(d->name, sizeof d->name, "%s", v);
    else if (!strcmp(k, "minor")) d->minor = atoi(v);
    else if (!strcmp(k, "util")) {
        d->n_util = 0;
        char buf[256]; snprintf(buf, sizeof buf, "%s", v);
        for (char *t = strtok(buf, ","); t && d->n_util < MAX_UTIL; t = strtok(NULL, ","))
            d->util[d->n_util++] = (unsigned)strtoul(t, NULL, 10);
    }
    else if (!strcmp(k, "mem_total")) d->mem_total = strtoull(v, NULL, 10);
    else if (!strcmp(k, "mem_used")) d->mem_used = strtoull(v, NULL, 10);
    else if (!strcmp(k, "mem_reserved")) d->mem_reserved = strtoull(v, NULL, 10);
    else if (!strcmp(k, "power_mw")) d->power_mw = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(k, "energy_mj")) d->energy_mj = strtoull(v, NULL, 10);
    else if (!strcmp(k, "energy_step_mj")) d->energy_step_mj = strtoull(v, NULL, 10);
    else if (!strcmp(k, "sm_clock")) d->sm_clock = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(k, "temp")) d->temp = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(k, "gpm")) d->gpm = atoi(v);
    else if (!strcmp(k, "sm_active")) d->sm_active = strtod(v, NULL);
    else if (!strcmp(k, "not_supported")) d->unsupported |= parse_unsupported(v);
    else if (!strcmp(k, "lost_after")) d->lost_after = strtol(v, NULL, 10);
    else if (!strcmp(k, "lost_when_exists")) snprintf(d->lost_path, sizeof d->lost_path, "%s", v);
    else if (!strcmp(k, "lost_code")) d->lost_code = atoi(v);
    else if (!strcmp(k, "mig")) d->mig_mode = atoi(v);
    else if (!strcmp(k, "max_mig")) d->max_mig = atoi(v);
    else if (!strcmp(k, "gi")) d->gi = atoi(v);
    else fprintf(stderr, "fake_nvml: unknown key '%s'\n", k);
}

static void load_config(void) {
    memset(g_gpus, 0, sizeof g_gpus);
    memset(g_migs, 0, sizeof g_migs);
    g_count = 0; g_init_error = NVML_SUCCESS;
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (!path) { g_init_error = NVML_ERROR_DRIVER_NOT_LOADED; return; }
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "fake_nvml: cannot open %s\n", path); g_init_error = NVML_ERROR_UNKNOWN; return; }
    for (int i = 0; i < MAX_GPUS; i++) init_defaults(&g_gpus[i], i);
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = 0;
        const char *k = line, *v = eq + 1;
        int i, j, n;
        char sub[64];
        if (!strcmp(k, "gpus")) g_count = atoi(v);
        else if (!strcmp(k, "driver_version")) snprintf(g_driver, sizeof g_driver, "%s", v);
        else if (!strcmp(k, "nvml_version")) snprintf(g_nvml, sizeof g_nvml, "%s", v);
        else if (!strcmp(k, "init_error")) g_init_error = atoi(v);
        else if (sscanf(k, "gpu.%d.mig.%d.%63s%n", &i, &j, sub, &n) == 3 && i >= 0 && i < MAX_GPUS && j >= 0 && j < MAX_MIG) {
            fake_dev *m = &g_migs[i][j];
            if (!m->present) {
                memset(m, 0, sizeof *m);
                m->present = 1; m->is_mig = 1; m->lost_after = -1; m->lost_code = NVML_ERROR_GPU_IS_LOST;
                m->parent = &g_gpus[i]; m->gi = j + 1; m->n_util = 0;
                m->mem_total = 9856ULL << 20;  /* a 1g.10gb instance of an 80 GB A100, as NVML reports it */
                snprintf(m->uuid, sizeof m->uuid, "MIG-fa4e%04x-%04x-4000-8000-000000000000", i, j);
                /* MIG device handles answer NotSupported for utilisation (its GPM SM activity is the
                   only measure of use), power, energy, clocks and temperature (the parent's) */
                m->unsupported = (1u << F_UTIL) | (1u << F_POWER) | (1u << F_ENERGY) | (1u << F_CLOCK) | (1u << F_TEMP);
                g_gpus[i].migs[j] = m;
                if (!g_gpus[i].max_mig) g_gpus[i].max_mig = MAX_MIG;
            }
            set_field(m, sub, v);
        }
        else if (sscanf(k, "gpu.%d.%63s", &i, sub) == 2 && i >= 0 && i < MAX_GPUS) set_field(&g_gpus[i], sub, v);
        else fprintf(stderr, "fake_nvml: unknown key '%s'\n", k);
    }
    fclose(f);
    if (g_count > MAX_GPUS) g_count = MAX_GPUS;
    for (int i = 0; i < g_count; i++) {
        g_gpus[i].present = 1;
        for (int j = 0; j < MAX_MIG; j++)
            if (g_migs[i][j].present) snprintf(g_migs[i][j].name, sizeof g_migs[i][j].name, "%s MIG", g_gpus[i].name);
        /* a GPU in MIG mode reports no device-level utilisation */
        if (g_gpus[i].mig_mode) g_gpus[i].unsupported |= 1u << F_UTIL;
    }
    for (int i = g_count; i < MAX_GPUS; i++)
        for (int j = 0; j < MAX_MIG; j++) g_migs[i][j].present = 0;
}

/* ---- init / system ---- */
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (g_refcount == 0) {
        load_config();
        if (g_init_error != NVML_SUCCESS) return g_init_error;
    }
    g_refcount++;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (g_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    g_refcount--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src) {
    if (dst == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (g_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    return copy_str(version, length, g_driver);
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    /* like the real library, this one works without nvmlInit */
    return copy_str(version, length, g_nvml);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (g_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)g_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, fake_dev **device) {
    if (g_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned)g_count) return NVML_ERROR_INVALID_ARGUMENT;
    fake_dev *d = &g_gpus[index];
    if (dev_lost(d)) return d->lost_code;
    *device = d;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, fake_dev **device) {
    if (g_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < g_count; i++) {
        if (!strcmp(g_gpus[i].uuid, uuid)) { *device = &g_gpus[i]; return NVML_SUCCESS; }
        for (int j = 0; j < MAX_MIG; j++)
            if (g_migs[i][j].present && !strcmp(g_migs[i][j].uuid, uuid)) { *device = &g_migs[i][j]; return NVML_SUCCESS; }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* ---- device queries ---- */
nvmlReturn_t nvmlDeviceGetUUID(fake_dev *d, char *uuid, unsigned int length) {
    nvmlReturn_t r = enter(d, F_UUID); if (r) return r;
    return copy_str(uuid, length, d->uuid);
}
nvmlReturn_t nvmlDeviceGetName(fake_dev *d, char *name, unsigned int length) {
    nvmlReturn_t r = enter(d, F_NAME); if (r) return r;
    return copy_str(name, length, d->name);
}
nvmlReturn_t nvmlDeviceGetIndex(fake_dev *d, unsigned int *index) {
    nvmlReturn_t r = enter(d, F_INDEX); if (r) return r;
    if (!index || d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)d->index;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMinorNumber(fake_dev *d, unsigned int *minor) {
    nvmlReturn_t r = enter(d, F_MINOR); if (r) return r;
    if (!minor || d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = (unsigned)d->minor;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(fake_dev *d, nvmlUtilization_t *u) {
    nvmlReturn_t r = enter(d, F_UTIL); if (r) return r;
    if (!u) return NVML_ERROR_INVALID_ARGUMENT;
    u->gpu = d->util[(d->calls[F_UTIL] - 1) % (unsigned)(d->n_util ? d->n_util : 1)];
    u->memory = u->gpu / 2;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(fake_dev *d, nvmlMemory_t *m) {
    nvmlReturn_t r = enter(d, F_MEM); if (r) return r;
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    /* v1 counts driver-reserved memory as used (why v2 exists) */
    m->total = d->mem_total;
    m->used = d->mem_used + d->mem_reserved;
    m->free = d->mem_total - m->used;
    return NVML_SUCCESS;
}
#ifndef FAKE_NO_MEMINFO_V2
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(fake_dev *d, nvmlMemory_v2_t *m) {
    nvmlReturn_t r = enter(d, F_MEM2); if (r) return r;
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    m->total = d->mem_total;
    m->reserved = d->mem_reserved;
    m->used = d->mem_used;
    m->free = d->mem_total - d->mem_reserved - d->mem_used;
    return NVML_SUCCESS;
}
#endif
nvmlReturn_t nvmlDeviceGetPowerUsage(fake_dev *d, unsigned int *power) {
    nvmlReturn_t r = enter(d, F_POWER); if (r) return r;
    if (!power) return NVML_ERROR_INVALID_ARGUMENT;
    *power = d->power_mw;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(fake_dev *d, unsigned long long *energy) {
    nvmlReturn_t r = enter(d, F_ENERGY); if (r) return r;
    if (!energy) return NVML_ERROR_INVALID_ARGUMENT;
    /* counter since driver load: grows by energy_step_mj per call */
    *energy = d->energy_mj + d->energy_step_mj * (d->calls[F_ENERGY] - 1);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetClockInfo(fake_dev *d, unsigned int type, unsigned int *clock) {
    nvmlReturn_t r = enter(d, F_CLOCK); if (r) return r;
    if (!clock || type > NVML_CLOCK_VIDEO) return NVML_ERROR_INVALID_ARGUMENT;
    *clock = type == NVML_CLOCK_SM || type == NVML_CLOCK_GRAPHICS ? d->sm_clock : 1593;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperature(fake_dev *d, unsigned int sensor, unsigned int *temp) {
    nvmlReturn_t r = enter(d, F_TEMP); if (r) return r;
    if (!temp || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = d->temp;
    return NVML_SUCCESS;
}

/* ---- MIG ---- */
static int mig_capable(const fake_dev *d) { return d->max_mig > 0; }

nvmlReturn_t nvmlDeviceGetMigMode(fake_dev *d, unsigned int *current, unsigned int *pending) {
    nvmlReturn_t r = enter(d, F_MIGMODE); if (r) return r;
    if (!current || !pending || d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_capable(d)) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = (unsigned)d->mig_mode;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(fake_dev *d, unsigned int *count) {
    nvmlReturn_t r = enter(d, F_MAXMIG); if (r) return r;
    if (!count || d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    /* nvml.h: "returns zero if MIG is not supported or enabled" */
    *count = mig_capable(d) && d->mig_mode ? (unsigned)d->max_mig : 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(fake_dev *d, unsigned int index, fake_dev **mig) {
    nvmlReturn_t r = enter(d, F_MIGHANDLE); if (r) return r;
    if (!mig || d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_capable(d) || !d->mig_mode) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= (unsigned)d->max_mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= MAX_MIG || !d->migs[index]) return NVML_ERROR_NOT_FOUND;  /* empty slot */
    *mig = d->migs[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(fake_dev *d, unsigned int *is_mig) {
    nvmlReturn_t r = enter(d, F_ISMIG); if (r) return r;
    if (!is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = (unsigned)d->is_mig;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(fake_dev *d, fake_dev **parent) {
    nvmlReturn_t r = enter(d, F_PARENT); if (r) return r;
    if (!parent || !d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *parent = d->parent;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceId(fake_dev *d, unsigned int *id) {
    nvmlReturn_t r = enter(d, F_GIID); if (r) return r;
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    *id = (unsigned)d->gi;
    return NVML_SUCCESS;
}

/* ---- GPM ---- */
nvmlReturn_t nvmlGpmQueryDeviceSupport(fake_dev *d, nvmlGpmSupport_t *s) {
    nvmlReturn_t r = enter(d, F_GPMSUP); if (r) return r;
    if (!s) return NVML_ERROR_INVALID_ARGUMENT;
    if (s->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    s->isSupportedDevice = d->gpm && !d->is_mig ? 1 : 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    if (g_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof(struct fake_gpm_sample));
    return *sample ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    if (g_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    free(sample);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSampleGet(fake_dev *d, nvmlGpmSample_t sample) {
    nvmlReturn_t r = enter(d, F_GPMGET); if (r) return r;
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->gpm || d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    sample->taken = 1; sample->dev = d; sample->sm_active = d->sm_active;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmMigSampleGet(fake_dev *d, unsigned int gpuInstanceId, nvmlGpmSample_t sample) {
    nvmlReturn_t r = enter(d, F_GPMGET); if (r) return r;
    if (!sample || d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->gpm) return NVML_ERROR_NOT_SUPPORTED;
    for (int j = 0; j < MAX_MIG; j++) {
        fake_dev *m = d->migs[j];
        if (m && (unsigned)m->gi == gpuInstanceId) {
            if (dev_lost(m)) return m->lost_code;
            sample->taken = 1; sample->dev = m; sample->sm_active = m->sm_active;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
    if (g_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (m->numMetrics > NVML_GPM_METRIC_MAX || !m->sample1 || !m->sample2) return NVML_ERROR_INVALID_ARGUMENT;
    if (!m->sample1->taken || !m->sample2->taken || m->sample1->dev != m->sample2->dev) return NVML_ERROR_INVALID_ARGUMENT;
    static char sm_short[] = "sm_util", sm_long[] = "SM Utilization", pct[] = "%";
    for (unsigned i = 0; i < m->numMetrics; i++) {
        nvmlGpmMetric_t *x = &m->metrics[i];
        if (x->metricId == NVML_GPM_METRIC_SM_UTIL) {
            x->nvmlReturn = NVML_SUCCESS;
            x->value = m->sample2->sm_active;
            x->metricInfo.shortName = sm_short; x->metricInfo.longName = sm_long; x->metricInfo.unit = pct;
        } else {
            x->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* ---- test-only ---- */
unsigned long long fakenvml_call_count(const char *uuid, const char *func) {
    for (int i = 0; i < g_count; i++) {
        fake_dev *cands[1 + MAX_MIG]; int n = 0;
        cands[n++] = &g_gpus[i];
        for (int j = 0; j < MAX_MIG; j++) if (g_migs[i][j].present) cands[n++] = &g_migs[i][j];
        for (int c = 0; c < n; c++) {
            if (strcmp(cands[c]->uuid, uuid)) continue;
            for (int f = 0; f < F_COUNT; f++) if (!strcmp(F_NAMES[f], func)) return cands[c]->calls[f];
        }
    }
    return (unsigned long long)-1;
}
