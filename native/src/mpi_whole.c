/* mpi_whole.c: the whole-program profile of a preloaded library
 * (MPI_Init, MPI_Finalize).
 * Part of libtinyprof_mpi: included by tinyprof_mpi.c, whose includes,
 * ops and globals it uses; not compiled on its own. */

/* ------------------------------------------------------------ whole program
 *
 * Preloaded (LD_PRELOAD) into a program that starts no profiler of its own,
 * the library profiles the whole program (docs/native.md, "Unchanged
 * binaries"): MPI_Init loads libtinyprof_whole.so from this library's
 * directory (the C++ implementation, kept out of this library so that
 * Python's capture loads no C++), which opens one region named after the
 * program and starts capture; MPI_Finalize closes the region and flushes,
 * while MPI still works. A profiler of the program's own (an annotated C++
 * program, tinyprof in Python) shows itself by setting its source: the
 * whole-program profile then stands down before writing anything, and what
 * it counted is forgotten, so that nothing is profiled twice. */

static void (*g_whole_finish)(void), (*g_whole_cancel)(void);

static void tp_whole_stand_down(void) {
    if (!atomic_exchange(&g_whole, 0)) return;
    g_whole_cancel();
    tinyprof_mpi_reset();
    pthread_mutex_lock(&g_comm_mu);     /* created under the region: the program's own nodes have other ids */
    for (int i = 0; i < atomic_load(&g_ncomms); i++) tp_rec(i)->created = 0;
    pthread_mutex_unlock(&g_comm_mu);
}

/* Whether LD_PRELOAD names this library (the program was not linked with it). */
static int tp_preloaded(const char *self) {
    const char *list = getenv("LD_PRELOAD"), *base = strrchr(self, '/');
    base = base ? base + 1 : self;
    size_t n = strlen(base);
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ": ");
        if (len >= n && memcmp(p + len - n, base, n) == 0 && (len == n || p[len - n - 1] == '/')) return 1;
        p += len + (p[len] != '\0');
    }
    return 0;
}

/* TINYPROF=0 (or off, false, no, in any case and spacing): tinyprof off, as in Python. */
static int tp_off(void) {
    const char *v = getenv("TINYPROF");
    char word[8] = "";
    if (v) sscanf(v, " %7s", word);
    for (char *c = word; *c; c++) *c = (char)(*c | 0x20);
    return !strcmp(word, "0") || !strcmp(word, "off") || !strcmp(word, "false") || !strcmp(word, "no");
}

static void tp_whole_start(void) {
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    Dl_info me;
    if (tp_off() || atomic_load(&g_source) || atomic_load(&g_whole) || !dladdr((void *)tp_whole_start, &me) ||
        !tp_preloaded(me.dli_fname))
        return;
    char path[4096];
    const char *slash = strrchr(me.dli_fname, '/');
    int dir = slash ? (int)(slash - me.dli_fname + 1) : 0;
    snprintf(path, sizeof path, "%.*slibtinyprof_whole.so", dir, me.dli_fname);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    int (*start)(void) = h ? (int (*)(void))dlsym(h, "tinyprof_whole_start") : NULL;
    g_whole_finish = h ? (void (*)(void))dlsym(h, "tinyprof_whole_finish") : NULL;
    g_whole_cancel = h ? (void (*)(void))dlsym(h, "tinyprof_whole_cancel") : NULL;
    if (!start || !g_whole_finish || !g_whole_cancel) {
        char what[4200];
        snprintf(what, sizeof what, "preloaded, but %s: no whole-program profile", h ? "libtinyprof_whole.so is "
                 "not tinyprof's" : dlerror());
        tp_warn_once(&warned, what);
        return;
    }
    if (start() != 0) return;       /* it said why */
    g_whole_source = atomic_load(&g_source);
    atomic_store(&g_whole, 1);
}

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) tp_whole_start();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) tp_whole_start();
    return rc;
}

int MPI_Finalize(void) {
    if (atomic_exchange(&g_whole, 0)) g_whole_finish();
    return PMPI_Finalize();
}
