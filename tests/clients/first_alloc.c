/*
 * A CUDA client whose first allocation comes right after its exec: it
 * loads the driver, makes a context, and allocates SIZE bytes, nothing
 * else. For the race test of limits declared in the environment (a
 * declaration must bind this very first allocation, every time). Prints
 * the driver's result of the allocation and exits 0 if it succeeded, 3 if
 * the driver (or gpumem's deny) refused it, 4 if the driver could not be
 * loaded or set up.
 *
 * usage: first-alloc LIBCUDA SIZE
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*init_fn)(unsigned);
typedef int (*device_get_fn)(int *, int);
typedef int (*ctx_create_fn)(void **, unsigned, int);
typedef int (*mem_alloc_fn)(unsigned long long *, size_t);

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBCUDA SIZE\n", argv[0]);
        return 4;
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 4;
    }
    init_fn init = (init_fn)dlsym(lib, "cuInit");
    device_get_fn device_get = (device_get_fn)dlsym(lib, "cuDeviceGet");
    ctx_create_fn ctx_create = (ctx_create_fn)dlsym(lib, "cuCtxCreate_v2");
    mem_alloc_fn mem_alloc = (mem_alloc_fn)dlsym(lib, "cuMemAlloc_v2");
    int device = 0;
    void *ctx = 0;
    if (!init || !device_get || !ctx_create || !mem_alloc || init(0) || device_get(&device, 0) ||
        ctx_create(&ctx, 0, device)) {
        fprintf(stderr, "setting up the driver failed\n");
        return 4;
    }
    unsigned long long ptr = 0;
    int result = mem_alloc(&ptr, strtoull(argv[2], 0, 10));
    printf("{\"result\":%d}\n", result);
    return result == 0 ? 0 : 3;
}
