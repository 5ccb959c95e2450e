# The C functions of two libraries namesrv already depends on, called without a Python call:
# ISA-L's CRC32 (the `isal` package's extension) and XXH3 (the `xxhash` package's). Both
# extensions export them; the running process has loaded both already, so their symbols are
# looked up in the loaded objects (dlopen with RTLD_NOLOAD), never loaded again or copied here.
# A missing symbol fails this import, and namesrv.fastpath falls back to the pure twins, which
# call the same functions through the packages' Python APIs (the versions are pinned).

import isal.isal_zlib as _isal_zlib
import xxhash._xxhash as _xxhash_ext


cdef extern from "<dlfcn.h>" nogil:
    void *dlopen(const char *filename, int flag)
    void *dlsym(void *handle, const char *symbol)
    const char *dlerror()
    int RTLD_NOW
    int RTLD_NOLOAD


ctypedef uint64_t (*_xxh3_64bits_fn)(const void *data, size_t length) noexcept nogil
ctypedef uint32_t (*_crc32_gzip_refl_fn)(uint32_t init_crc, const unsigned char *buf, uint64_t length) noexcept nogil


cdef void *_loaded_symbol(object module, const char *name) except NULL:
    """`name` in the shared object `module` was loaded from."""
    cdef bytes path = os.fsencode(module.__file__)
    cdef void *handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD)
    cdef void *symbol = NULL
    if handle != NULL:
        symbol = dlsym(handle, name)
    if symbol == NULL:
        raise ImportError(f"{name.decode()} not found in {module.__file__}")
    return symbol


# XXH3's dispatching entry, as the package's own functions call it: the widest vector code the CPU
# runs (AVX2 where it has it; the plain XXH3_64bits is the SSE2 build's). The same values.
cdef _xxh3_64bits_fn _xxh3_64bits = <_xxh3_64bits_fn>_loaded_symbol(_xxhash_ext, b"XXH3_64bits_dispatch")
cdef _crc32_gzip_refl_fn _crc32_gzip_refl = <_crc32_gzip_refl_fn>_loaded_symbol(_isal_zlib, b"crc32_gzip_refl")


cdef inline uint64_t _digest(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """XXH3 (64 bits, seed 0) of p[0:n], 0 read as 1 (0 marks an empty slot of a set). Not
    cryptographic: it tells a topic entry from the broker's own previous entries, where only an
    accident can collide (and a broker can only ever mislead itself)."""
    cdef uint64_t h = _xxh3_64bits(p, <size_t>n)
    return h if h else 1


cdef inline uint32_t _crc32(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """zlib's CRC32 of p[0:n]."""
    return _crc32_gzip_refl(0, p, <uint64_t>n)


cdef enum:
    # A buffer at least this long is hashed, checksummed or pre-scanned with the interpreter lock released: the
    # release and re-acquire cost about a microsecond, a 64 KiB CRC32 a few.
    GIL_FREE_BYTES = 64 * 1024
