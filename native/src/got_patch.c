/* got_patch.c: rewriting GOT entries of loaded objects (tp_patch), for
 * tinyprof_mpi_patch (binaries that call MPI without PMPI interposition) and
 * for the transport view's UCP hooks (tinyprof_ucx.c). A compilation unit
 * of its own: it needs none of the MPI state, and both halves of
 * libtinyprof_mpi call it. */
#define _GNU_SOURCE
#include "tinyprof/tinyprof_mpi.h"
#include "tinyprof_internal.h"

#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#define TP_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define TP_R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define TP_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define TP_R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

typedef struct {
    const char *object, *skip, *prefix;
    void *(*replace)(const char *name, void *current, void *arg);
    void *arg;
    const void *self_base;  /* our load address */
    int matched, rewritten;
} tp_patch_ctx;

#ifdef TP_R_JUMP_SLOT

/* Point the slot at `f`; a slot in the RELRO segment is made writable and
 * read-only again. Returns 0, or -1. */
static int tp_write_slot(void **slot, void *f, uintptr_t relro_lo, uintptr_t relro_hi) {
    uintptr_t page = (uintptr_t)slot & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
    size_t len = (uintptr_t)(slot + 1) - page;
    int relro = (uintptr_t)slot >= relro_lo && (uintptr_t)slot < relro_hi;
    if (relro && mprotect((void *)page, len, PROT_READ | PROT_WRITE) != 0) return -1;
    __atomic_store_n(slot, f, __ATOMIC_RELEASE);
    if (relro) mprotect((void *)page, len, PROT_READ);
    return 0;
}

static int tp_patch_object(struct dl_phdr_info *info, size_t size, void *data) {
    tp_patch_ctx *ctx = data;
    uintptr_t base = info->dlpi_addr, relro_lo = 0, relro_hi = 0;
    const ElfW(Dyn) *dyn = NULL;
    (void)size;
    if (!info->dlpi_name || !strstr(info->dlpi_name, ctx->object) || (const void *)base == ctx->self_base ||
        (ctx->skip && strstr(info->dlpi_name, ctx->skip)))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        if (ph->p_type == PT_GNU_RELRO) {
            relro_lo = base + ph->p_vaddr;
            relro_hi = relro_lo + ph->p_memsz;
        }
    }
    if (!dyn) return 0;
    ctx->matched++;
    /* glibc relocates these d_ptr in place; an unrelocated one is an offset. */
#define TP_PTR(v) ((uintptr_t)(v) < base ? (uintptr_t)(v) + base : (uintptr_t)(v))
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *tabs[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    int rela = 1;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)TP_PTR(d->d_un.d_ptr); break;
        case DT_STRTAB: strtab = (const char *)TP_PTR(d->d_un.d_ptr); break;
        case DT_JMPREL: tabs[0] = (const ElfW(Rela) *)TP_PTR(d->d_un.d_ptr); break;
        case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
        case DT_RELA: tabs[1] = (const ElfW(Rela) *)TP_PTR(d->d_un.d_ptr); break;
        case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
        case DT_PLTREL: rela = d->d_un.d_val == DT_RELA; break;
        }
    }
#undef TP_PTR
    if (!symtab || !strtab || !rela) return 0;
    for (int t = 0; t < 2; t++) {
        for (size_t i = 0; tabs[t] && i < sizes[t] / sizeof(ElfW(Rela)); i++) {
            const ElfW(Rela) *r = &tabs[t][i];
            unsigned long type = ELF64_R_TYPE(r->r_info);
            if (type != TP_R_JUMP_SLOT && type != TP_R_GLOB_DAT) continue;
            const char *name = strtab + symtab[ELF64_R_SYM(r->r_info)].st_name;
            if (strncmp(name, ctx->prefix, strlen(ctx->prefix)) != 0) continue;
            void **slot = (void **)(base + r->r_offset), *f = ctx->replace(name, *slot, ctx->arg);
            if (f && *slot != f && tp_write_slot(slot, f, relro_lo, relro_hi) == 0) ctx->rewritten++;
        }
    }
    return 0;
}
#endif

int tp_patch(const char *object, const char *skip, const char *prefix,
             void *(*replace)(const char *, void *, void *), void *arg) {
#ifdef TP_R_JUMP_SLOT
    Dl_info di;
    tp_patch_ctx ctx = {.object = object, .skip = skip, .prefix = prefix, .replace = replace, .arg = arg};
    if (!object || !dladdr((void *)tp_patch, &di)) return -1;
    ctx.self_base = di.dli_fbase;
    dl_iterate_phdr(tp_patch_object, &ctx);
    return ctx.matched ? ctx.rewritten : -1;
#else
    (void)object, (void)skip, (void)prefix, (void)replace, (void)arg;
    return -1;
#endif
}

/* Our wrapper of `name`, or NULL if this library does not define it (dlsym
 * on our handle also searches our dependencies: libmpi's MPI_* are not ours). */
static void *tp_own(const char *name, void *current, void *self) {
    Dl_info di, me;
    void *f = dlsym(self, name);
    (void)current;
    return f && dladdr(f, &di) && dladdr((void *)tp_own, &me) && di.dli_fbase == me.dli_fbase ? f : NULL;
}

int tinyprof_mpi_patch(const char *object) {
    Dl_info di;
    void *self;
    if (!object || !dladdr((void *)tinyprof_mpi_patch, &di) ||
        !(self = dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD)))
        return -1;
    int n = tp_patch(object, NULL, "MPI_", tp_own, self);
    dlclose(self);
    return n;
}
