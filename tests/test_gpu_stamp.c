/* make cuda-test's stamp (model/gpu_stamp.h), on the CPU: the verdict a
 * GPU run gets from it (a good stamp gives the banner's words; a missing
 * file, another build, another GPU, a changed library and a malformed file
 * each refuse, naming why, and the refusal names make cuda-test), the
 * format's round trip and the writer's merge, the uuid's text, the
 * build id as read from an ELF file against binutils' readelf, and the
 * whole check as a process makes it, on a stamp beside this binary. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../model/gpu_stamp.h"
#include "device.h"

#define PATH "build-cuda/gpu_verified.stamp"
#define BUILD_ID "0123456789abcdef0123456789abcdef01234567"
#define UUID_A "GPU-11111111-2222-3333-4444-555555555555"
#define UUID_B "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
#define NAME_A "NVIDIA H200 (sm_90, cuBLAS 13, cuBLASLt 130100, NCCL 22803)"

static const char GOOD[] = "# a comment\n"
                           "build " BUILD_ID "\n"
                           "\n"
                           "gpu " UUID_A " 41 2026-11-28T15:02Z " NAME_A "\n";

static const struct gpu_identity ME = {.build_id = BUILD_ID, .uuid = UUID_A, .name = NAME_A};

/* The verdict's rc and words for text as the stamp at PATH. */
static int check(const char *text, const struct gpu_identity *me, char *words) {
    return gpu_stamp_check(PATH, text, me, words, DEVICE_VERIFICATION_LEN);
}

static void test_good_stamp_gives_the_banner_words(void **state) {
    (void)state;
    char words[DEVICE_VERIFICATION_LEN];
    assert_int_equal(check(GOOD, &ME, words), 0);
    assert_string_equal(words, "verified by make cuda-test on " UUID_A ": 41 tests passed, 2026-11-28T15:02Z");
}

static void test_missing_stamp_refuses_naming_make_cuda_test(void **state) {
    (void)state;
    char words[DEVICE_VERIFICATION_LEN], line[DEVICE_ERR_LEN];
    assert_int_equal(check(NULL, &ME, words), -1);
    assert_string_equal(words, "no stamp " PATH);
    gpu_stamp_refusal(words, line, sizeof line);
    assert_non_null(strstr(line, "run `make cuda-test`"));
    assert_non_null(strstr(line, "no stamp " PATH));
    assert_null(strchr(line, '\n')); /* one line */
}

static void test_another_build_refuses(void **state) {
    (void)state;
    char words[DEVICE_VERIFICATION_LEN];
    struct gpu_identity rebuilt = ME;
    rebuilt.build_id = "fedcba9876543210fedcba9876543210fedcba98";
    assert_int_equal(check(GOOD, &rebuilt, words), -1);
    assert_string_equal(words, "the stamp " PATH " is for another build (0123456789ab, this one is fedcba987654)");
}

static void test_another_gpu_refuses_naming_both(void **state) {
    (void)state;
    char words[DEVICE_VERIFICATION_LEN];
    struct gpu_identity other = ME;
    other.uuid = UUID_B;
    assert_int_equal(check(GOOD, &other, words), -1);
    assert_string_equal(words, "the stamp " PATH " is for " UUID_A ", not this GPU " UUID_B);
}

static void test_changed_library_refuses(void **state) {
    (void)state;
    char words[DEVICE_VERIFICATION_LEN];
    struct gpu_identity updated = ME;
    updated.name = "NVIDIA H200 (sm_90, cuBLAS 13, cuBLASLt 130200, NCCL 22803)";
    assert_int_equal(check(GOOD, &updated, words), -1);
    assert_non_null(strstr(words, "a library changed"));
    assert_non_null(strstr(words, "cuBLASLt 130200"));
}

/* Each malformed file refuses, naming the line. */
static void test_malformed_stamps_refuse(void **state) {
    (void)state;
    static const struct {
        const char *text, *why;
    } cases[] = {
        {"", "is malformed: no build line"},
        {"build " BUILD_ID "\n", "is malformed: no gpu line"},
        {"build " BUILD_ID "\nbuild " BUILD_ID "\n", "line 2: a second or malformed build line"},
        {"build NOTHEX\ngpu " UUID_A " 41 2026-11-28T15:02Z x\n", "line 1: a second or malformed build line"},
        {"build " BUILD_ID "\ngpu " UUID_A " 0 2026-11-28T15:02Z x\n", "line 2: a malformed gpu line"},
        {"build " BUILD_ID "\ngpu " UUID_A " 41 2026-11-28T15:02Z\n", "line 2: a malformed gpu line"},
        {"build " BUILD_ID "\nverified yes\n", "line 2: an unknown line 'verified yes'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char words[DEVICE_VERIFICATION_LEN];
        assert_int_equal(check(cases[i].text, &ME, words), -1);
        if (!strstr(words, cases[i].why)) fail_msg("case %zu: '%s' lacks '%s'", i, words, cases[i].why);
    }
}

/* put + format + parse: a second GPU joins the first, the same GPU's line
 * is replaced, another build starts over. */
static void test_put_format_parse(void **state) {
    (void)state;
    struct gpu_stamp s = {0}, back;
    char text[GPU_STAMP_TEXT_LEN], why[DEVICE_ERR_LEN], words[DEVICE_VERIFICATION_LEN];
    struct gpu_stamp_gpu a = {.uuid = UUID_A, .tests = 41, .utc = "2026-11-28T15:02Z", .name = NAME_A};
    struct gpu_stamp_gpu b = {.uuid = UUID_B, .tests = 40, .utc = "2026-11-28T16:00Z", .name = "NVIDIA H100"};
    assert_int_equal(gpu_stamp_put(&s, BUILD_ID, &a), 0);
    assert_int_equal(gpu_stamp_put(&s, BUILD_ID, &b), 0);
    a.tests = 42;
    assert_int_equal(gpu_stamp_put(&s, BUILD_ID, &a), 0);
    assert_int_equal(s.gpus, 2);
    assert_int_equal(gpu_stamp_format(&s, text, sizeof text), 0);
    assert_int_equal(gpu_stamp_parse(text, &back, why, sizeof why), 0);
    assert_string_equal(back.build_id, BUILD_ID);
    assert_int_equal(back.gpus, 2);
    assert_int_equal(back.gpu[0].tests, 42);
    assert_string_equal(back.gpu[1].name, "NVIDIA H100");
    assert_int_equal(check(text, &ME, words), 0);
    assert_non_null(strstr(words, "42 tests passed"));
    assert_int_equal(gpu_stamp_format(&s, text, strlen(text)), -1); /* one byte short */
    assert_int_equal(gpu_stamp_put(&s, "abcdef", &b), 0);
    assert_int_equal(s.gpus, 1);
    assert_string_equal(s.gpu[0].uuid, UUID_B);
}

static void test_full_stamp_takes_no_more_gpus(void **state) {
    (void)state;
    struct gpu_stamp s = {0};
    struct gpu_stamp_gpu g = {.tests = 1, .utc = "2026-11-28T15:02Z", .name = "x"};
    for (int i = 0; i <= GPU_STAMP_MAX_GPUS; i++) {
        snprintf(g.uuid, sizeof g.uuid, "GPU-%d", i);
        assert_int_equal(gpu_stamp_put(&s, BUILD_ID, &g), i < GPU_STAMP_MAX_GPUS ? 0 : -1);
    }
    assert_int_equal(s.gpus, GPU_STAMP_MAX_GPUS);
}

static void test_uuid_text(void **state) {
    (void)state;
    const unsigned char bytes[16] = {0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0,
                                     0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
    char out[DEVICE_UUID_LEN];
    gpu_stamp_uuid_text(bytes, out);
    assert_string_equal(out, "GPU-12345678-9abc-def0-0123-456789abcdef");
}

static void test_stamp_path_beside_the_executable(void **state) {
    (void)state;
    char out[GPU_STAMP_PATH_LEN];
    assert_int_equal(gpu_stamp_path_beside("/x/build-cuda/train", out, sizeof out), 0);
    assert_string_equal(out, "/x/build-cuda/" GPU_STAMP_FILE);
    assert_int_equal(gpu_stamp_path_beside("train", out, sizeof out), 0);
    assert_string_equal(out, "./" GPU_STAMP_FILE);
    assert_int_equal(gpu_stamp_path_beside("/x/train", out, sizeof "/x/" GPU_STAMP_FILE - 1), -1);
}

/* This test binary's build id (the Makefile links with --build-id=sha1)
 * as readelf -n prints it; a file that is not ELF has none. */
static void test_build_id_matches_readelf(void **state) {
    (void)state;
    char mine[GPU_STAMP_BUILD_ID_LEN], why[DEVICE_ERR_LEN], exe[GPU_STAMP_PATH_LEN];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(n > 0);
    exe[n] = '\0';
    assert_int_equal(gpu_stamp_build_id(exe, mine, sizeof mine, why, sizeof why), 0);
    char cmd[GPU_STAMP_PATH_LEN + 64], theirs[GPU_STAMP_BUILD_ID_LEN] = "";
    snprintf(cmd, sizeof cmd, "readelf -n '%s' | sed -n 's/.*Build ID: *//p'", exe);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    if (!fgets(theirs, sizeof theirs, p)) theirs[0] = '\0';
    pclose(p);
    theirs[strcspn(theirs, "\n")] = '\0';
    assert_int_equal(strlen(mine), 40); /* sha1's 20 bytes */
    assert_string_equal(mine, theirs);
    assert_int_equal(gpu_stamp_build_id("Makefile", mine, sizeof mine, why, sizeof why), -1);
    assert_non_null(strstr(why, "not a 64-bit ELF file"));
    assert_int_equal(gpu_stamp_build_id("no/such/file", mine, sizeof mine, why, sizeof why), -1);
}

/* The file functions: a missing stamp is 0 (no file), a present one is read
 * whole, and one too long for the buffer is an error. */
static void test_load(void **state) {
    (void)state;
    char path[] = "/tmp/shardlab_stamp_XXXXXX", text[sizeof GOOD], why[DEVICE_ERR_LEN];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, GOOD, strlen(GOOD)), (ssize_t)strlen(GOOD));
    close(fd);
    assert_int_equal(gpu_stamp_load(path, text, sizeof text, why, sizeof why), 1);
    assert_string_equal(text, GOOD);
    assert_int_equal(gpu_stamp_load(path, text, sizeof text - 1, why, sizeof why), -1);
    unlink(path);
    assert_int_equal(gpu_stamp_load(path, text, sizeof text, why, sizeof why), 0);
}

/* The whole check as a process makes it (gpu_stamp_verify_self): a stamp
 * beside this test binary, for its own build, verifies UUID_A and refuses
 * UUID_B; without the file, "no stamp" naming it. */
static void test_verify_self(void **state) {
    (void)state;
    char exe[GPU_STAMP_PATH_LEN], path[GPU_STAMP_PATH_LEN], why[DEVICE_ERR_LEN], text[GPU_STAMP_TEXT_LEN];
    char words[DEVICE_VERIFICATION_LEN];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(n > 0);
    exe[n] = '\0';
    assert_int_equal(gpu_stamp_path_beside(exe, path, sizeof path), 0);
    struct gpu_stamp s = {0};
    struct gpu_stamp_gpu a = {.uuid = UUID_A, .tests = 7, .utc = "2026-11-28T15:02Z", .name = NAME_A};
    assert_int_equal(gpu_stamp_build_id(exe, s.build_id, sizeof s.build_id, why, sizeof why), 0);
    assert_int_equal(gpu_stamp_put(&s, s.build_id, &a), 0);
    assert_int_equal(gpu_stamp_format(&s, text, sizeof text), 0);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    int verified = gpu_stamp_verify_self(UUID_A, NAME_A, words, sizeof words);
    int other = gpu_stamp_verify_self(UUID_B, NAME_A, why, sizeof why);
    unlink(path);
    assert_int_equal(verified, 0);
    assert_non_null(strstr(words, "7 tests passed"));
    assert_int_equal(other, -1);
    assert_non_null(strstr(why, "not this GPU " UUID_B));
    assert_int_equal(gpu_stamp_verify_self(UUID_A, NAME_A, words, sizeof words), -1);
    assert_non_null(strstr(words, "no stamp "));
    assert_non_null(strstr(words, path));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_stamp_gives_the_banner_words),
        cmocka_unit_test(test_missing_stamp_refuses_naming_make_cuda_test),
        cmocka_unit_test(test_another_build_refuses),
        cmocka_unit_test(test_another_gpu_refuses_naming_both),
        cmocka_unit_test(test_changed_library_refuses),
        cmocka_unit_test(test_malformed_stamps_refuse),
        cmocka_unit_test(test_put_format_parse),
        cmocka_unit_test(test_full_stamp_takes_no_more_gpus),
        cmocka_unit_test(test_uuid_text),
        cmocka_unit_test(test_stamp_path_beside_the_executable),
        cmocka_unit_test(test_build_id_matches_readelf),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_verify_self),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
