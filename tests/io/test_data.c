/* Tests for the data module (src/io/data.c). Files go under a mkdtemp dir. */
#define _XOPEN_SOURCE 700

#include "check_main.h"

#include <check.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "osdp/data.h"

static char g_tmp[256];

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */

static const char *tmp_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, sizeof buf[0], "%s/%s", g_tmp, name);
    return p;
}

static void put_le32(unsigned char *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)u;
    p[1] = (unsigned char)(u >> 8);
    p[2] = (unsigned char)(u >> 16);
    p[3] = (unsigned char)(u >> 24);
}

/* Write an llm.c shard; header fields and the real token count are separate so
 * that broken files can be made. */
static void write_shard_raw(const char *path, int32_t magic, int32_t version, int32_t count, const uint16_t *tok,
                            size_t n_tok)
{
    unsigned char header[OSDP_SHARD_HEADER_BYTES];
    memset(header, 0, sizeof header);
    put_le32(header, magic);
    put_le32(header + 4, version);
    put_le32(header + 8, count);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(header, 1, sizeof header, f), sizeof header);
    for (size_t i = 0; i < n_tok; i++) {
        unsigned char b[2] = {(unsigned char)(tok[i] & 0xff), (unsigned char)(tok[i] >> 8)};
        ck_assert_uint_eq(fwrite(b, 1, 2, f), 2);
    }
    ck_assert_int_eq(fclose(f), 0);
}

static void write_shard(const char *path, const uint16_t *tok, size_t n)
{
    write_shard_raw(path, OSDP_SHARD_MAGIC, OSDP_SHARD_VERSION, (int32_t)n, tok, n);
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    if (n)
        ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void make_dir(const char *path) { ck_assert_int_eq(mkdir(path, 0700), 0); }

/* Global token i of an open dataset, walking the segments. */
static int token_at(const osdp_dataset *ds, size_t i)
{
    for (int k = 0; k < ds->n_seg; k++)
        if (i >= ds->seg[k].offset && i < ds->seg[k].offset + ds->seg[k].n_tokens)
            return ds->seg[k].tokens[i - ds->seg[k].offset];
    ck_abort_msg("token %zu out of range", i);
    return -1;
}

static uint16_t *pattern(size_t n, unsigned mul, unsigned add, unsigned mod)
{
    uint16_t *t = malloc(n * sizeof *t);
    ck_assert_ptr_nonnull(t);
    for (size_t i = 0; i < n; i++)
        t[i] = (uint16_t)((i * mul + add) % mod);
    return t;
}

/* open must fail with `code` and a message containing `word` and the file name */
static void expect_fail(const char *path, int vocab, int seq_len, osdp_status code, const char *word,
                        const char *file)
{
    osdp_dataset ds;
    osdp_status rc = osdp_data_open(&ds, path, vocab, seq_len);
    const char *msg = osdp_error_message();
    ck_assert_msg(rc == code, "%s: expected status %d, got %d (%s)", path, (int)code, (int)rc, msg);
    ck_assert_msg(strstr(msg, word) != NULL, "message lacks \"%s\": %s", word, msg);
    ck_assert_msg(strstr(msg, file) != NULL, "message does not name %s: %s", file, msg);
    ck_assert_ptr_null(ds.seg); /* left zeroed */
    ck_assert_uint_eq(ds.n_tokens, 0);
    osdp_data_close(&ds); /* harmless */
}

/* ------------------------------------------------------------------------ */
/* reading                                                                   */

START_TEST(test_shard_roundtrip)
{
    const size_t n = 5000;
    uint16_t *tok = pattern(n, 7919, 3, 50257);
    tok[17] = 50256; /* highest id allowed by vocab 50257 */
    const char *p = tmp_path("one.bin");
    write_shard(p, tok, n);
    osdp_dataset ds;
    ck_assert_msg(osdp_data_open(&ds, p, 50257, 64) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_uint_eq(ds.n_tokens, n);
    ck_assert_int_eq(ds.vocab, 50257);
    ck_assert_str_eq(ds.path, p);
    ck_assert_int_eq(ds.n_seg, 1);
    ck_assert_ptr_nonnull(ds.seg[0].map); /* mapped, not copied (little-endian host) */
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(token_at(&ds, i), tok[i]);
    osdp_data_close(&ds);
    ck_assert_ptr_null(ds.seg);
    ck_assert_uint_eq(ds.n_tokens, 0);
    free(tok);
}
END_TEST

START_TEST(test_text_read)
{
    unsigned char bytes[600];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (unsigned char)((i * 37 + 11) & 0xff); /* covers 0 and 255 */
    const char *p = tmp_path("text.txt");
    write_bytes(p, bytes, sizeof bytes);
    osdp_dataset ds;
    ck_assert_msg(osdp_data_open(&ds, p, 256, 16) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_uint_eq(ds.n_tokens, sizeof bytes);
    for (size_t i = 0; i < sizeof bytes; i++)
        ck_assert_int_eq(token_at(&ds, i), bytes[i]);
    osdp_data_close(&ds);

    /* any name not ending in .bin is read as bytes, with any vocab >= 256 */
    ck_assert_msg(osdp_data_open(&ds, p, 50257, 16) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_uint_eq(ds.n_tokens, sizeof bytes);
    osdp_data_close(&ds);
}
END_TEST

START_TEST(test_directory_concat)
{
    const char *dir = tmp_path("shards");
    make_dir(dir);
    uint16_t *a = pattern(300, 1, 0, 1000);   /* 0..299 */
    uint16_t *b = pattern(200, 1, 500, 1000); /* 500..699 */
    uint16_t *c = pattern(7, 1, 900, 1000);
    char path[600];
    /* written in reverse name order so directory order cannot be relied on */
    snprintf(path, sizeof path, "%s/shard_01.bin", dir);
    write_shard(path, b, 200);
    snprintf(path, sizeof path, "%s/shard_00.bin", dir);
    write_shard(path, a, 300);
    snprintf(path, sizeof path, "%s/README.txt", dir); /* ignored */
    write_bytes(path, "hello", 5);
    snprintf(path, sizeof path, "%s/sub.bin", dir); /* a directory: ignored */
    make_dir(path);
    snprintf(path, sizeof path, "%s/shard_02.bin", dir); /* empty shard: allowed, skipped */
    write_shard(path, c, 0);
    /* llm.c's names: a validation shard and a token table are not training data */
    snprintf(path, sizeof path, "%s/shard_val_000000.bin", dir);
    write_shard(path, c, 7);
    snprintf(path, sizeof path, "%s/shard_tokenizer.bin", dir);
    write_bytes(path, "not a shard", 11);

    osdp_dataset ds;
    ck_assert_msg(osdp_data_open(&ds, dir, 1000, 32) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_uint_eq(ds.n_tokens, 500);
    ck_assert_int_eq(ds.n_seg, 2);
    ck_assert_int_eq(ds.n_val_shards, 1);
    for (size_t i = 0; i < 300; i++)
        ck_assert_int_eq(token_at(&ds, i), a[i]);
    for (size_t i = 0; i < 200; i++)
        ck_assert_int_eq(token_at(&ds, 300 + i), b[i]);

    /* same stream in one file: same hash (hash ignores how data is split) */
    uint16_t all[500];
    memcpy(all, a, 300 * sizeof *a);
    memcpy(all + 300, b, 200 * sizeof *b);
    const char *one = tmp_path("concat.bin");
    write_shard(one, all, 500);
    osdp_dataset ds1;
    ck_assert_msg(osdp_data_open(&ds1, one, 1000, 32) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_uint_eq(osdp_data_hash(&ds), osdp_data_hash(&ds1));

    /* batches agree too, including windows that straddle the shard boundary */
    enum { NS = 256, T = 32 };
    static int in0[NS * T], tg0[NS * T], in1[NS * T], tg1[NS * T];
    osdp_data_batch(&ds, 5, 3, 0, NS, T, in0, tg0);
    osdp_data_batch(&ds1, 5, 3, 0, NS, T, in1, tg1);
    ck_assert_int_eq(memcmp(in0, in1, sizeof in0), 0);
    ck_assert_int_eq(memcmp(tg0, tg1, sizeof tg0), 0);
    int straddles = 0;
    for (int j = 0; j < NS; j++) {
        size_t s = osdp_data_seq_start(5, 3, j, 500, T);
        straddles += s < 300 && s + T >= 300;
        for (int t = 0; t < T; t++) {
            ck_assert_int_eq(in0[j * T + t], all[s + t]);
            ck_assert_int_eq(tg0[j * T + t], all[s + t + 1]);
        }
    }
    ck_assert_int_gt(straddles, 0);

    osdp_data_close(&ds);
    osdp_data_close(&ds1);
    free(a);
    free(b);
    free(c);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* batches                                                                   */

START_TEST(test_batch_determinism)
{
    const size_t n = 10000;
    uint16_t *tok = pattern(n, 1, 0, 65535); /* token = position: starts are visible */
    const char *p = tmp_path("det.bin");
    write_shard(p, tok, n);
    osdp_dataset ds;
    ck_assert_msg(osdp_data_open(&ds, p, 65536, 16) == OSDP_OK, "%s", osdp_error_message());
    enum { B = 8, T = 16 };
    int in[B * T], tg[B * T], in2[B * T], tg2[B * T];
    osdp_data_batch(&ds, 1234, 7, 0, B, T, in, tg);
    osdp_data_batch(&ds, 1234, 7, 0, B, T, in2, tg2);
    ck_assert_int_eq(memcmp(in, in2, sizeof in), 0);
    ck_assert_int_eq(memcmp(tg, tg2, sizeof tg), 0);

    /* global sequence j alone equals row j of [0, 8) */
    for (int j = 0; j < B; j++) {
        int one_in[T], one_tg[T];
        osdp_data_batch(&ds, 1234, 7, j, 1, T, one_in, one_tg);
        ck_assert_int_eq(memcmp(one_in, in + j * T, sizeof one_in), 0);
        ck_assert_int_eq(memcmp(one_tg, tg + j * T, sizeof one_tg), 0);
        ck_assert_uint_eq((size_t)one_in[0], osdp_data_seq_start(1234, 7, j, n, T));
    }
    /* two "ranks" of 4 reproduce the batch of one rank of 8 */
    osdp_data_batch(&ds, 1234, 7, 0, 4, T, in2, tg2);
    osdp_data_batch(&ds, 1234, 7, 4, 4, T, in2 + 4 * T, tg2 + 4 * T);
    ck_assert_int_eq(memcmp(in, in2, sizeof in), 0);
    ck_assert_int_eq(memcmp(tg, tg2, sizeof tg), 0);

    /* a different step or seed gives a different batch */
    osdp_data_batch(&ds, 1234, 8, 0, B, T, in2, tg2);
    ck_assert_int_ne(memcmp(in, in2, sizeof in), 0);
    osdp_data_batch(&ds, 1235, 7, 0, B, T, in2, tg2);
    ck_assert_int_ne(memcmp(in, in2, sizeof in), 0);

    /* starts stay in range and spread over the data */
    size_t lo = n, hi = 0;
    for (long s = 0; s < 200; s++)
        for (long j = 0; j < 50; j++) {
            size_t st = osdp_data_seq_start(99, s, j, n, T);
            ck_assert_uint_le(st + T, n - 1);
            lo = st < lo ? st : lo;
            hi = st > hi ? st : hi;
        }
    ck_assert_uint_lt(lo, 100);
    ck_assert_uint_gt(hi, n - T - 100);
    osdp_data_close(&ds);
    free(tok);
}
END_TEST

START_TEST(test_targets_shifted)
{
    const size_t n = 3000;
    uint16_t *tok = pattern(n, 2654435761u, 17, 50257);
    const char *p = tmp_path("shift.bin");
    write_shard(p, tok, n);
    osdp_dataset ds;
    ck_assert_msg(osdp_data_open(&ds, p, 50257, 32) == OSDP_OK, "%s", osdp_error_message());
    enum { B = 16, T = 32 };
    int in[B * T], tg[B * T];
    osdp_data_batch(&ds, 42, 0, 100, B, T, in, tg);
    for (int i = 0; i < B; i++) {
        size_t s = osdp_data_seq_start(42, 0, 100 + i, n, T);
        for (int t = 0; t < T; t++) {
            ck_assert_int_eq(in[i * T + t], tok[s + t]);
            ck_assert_int_eq(tg[i * T + t], tok[s + t + 1]);
            if (t + 1 < T)
                ck_assert_int_eq(tg[i * T + t], in[i * T + t + 1]);
        }
    }
    /* a shorter seq_len than the one opened with is fine */
    osdp_data_batch(&ds, 42, 0, 0, 2, 5, in, tg);
    for (int i = 0; i < 2; i++) {
        size_t s = osdp_data_seq_start(42, 0, i, n, 5);
        for (int t = 0; t < 5; t++)
            ck_assert_int_eq(tg[i * 5 + t], tok[s + t + 1]);
    }
    osdp_data_close(&ds);
    free(tok);
}
END_TEST

START_TEST(test_exact_minimum_length)
{
    /* n_tokens == seq_len + 1: the only window is the whole file */
    uint16_t tok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const char *p = tmp_path("min.bin");
    write_shard(p, tok, 9);
    osdp_dataset ds;
    ck_assert_msg(osdp_data_open(&ds, p, 10, 8) == OSDP_OK, "%s", osdp_error_message());
    int in[3 * 8], tg[3 * 8];
    osdp_data_batch(&ds, 7, 123456789, 1000000007L, 3, 8, in, tg);
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 8; t++) {
            ck_assert_int_eq(in[i * 8 + t], t + 1);
            ck_assert_int_eq(tg[i * 8 + t], t + 2);
        }
    /* precondition violated (seq_len too long): zeros, no out-of-range read */
    int big_in[20], big_tg[20];
    osdp_data_batch(&ds, 7, 0, 0, 1, 20, big_in, big_tg);
    for (int t = 0; t < 20; t++)
        ck_assert_int_eq(big_in[t] | big_tg[t], 0);
    osdp_data_close(&ds);
}
END_TEST

START_TEST(test_hash_sensitivity)
{
    uint16_t *tok = pattern(1000, 3, 1, 5000);
    const char *p = tmp_path("h1.bin"), *q = tmp_path("h2.bin"), *r = tmp_path("h3.bin");
    write_shard(p, tok, 1000);
    tok[500] ^= 1;
    write_shard(q, tok, 1000);
    tok[500] ^= 1;
    write_shard(r, tok, 999); /* one token shorter */
    osdp_dataset a, b, c, a2;
    ck_assert(osdp_data_open(&a, p, 5000, 8) == OSDP_OK);
    ck_assert(osdp_data_open(&b, q, 5000, 8) == OSDP_OK);
    ck_assert(osdp_data_open(&c, r, 5000, 8) == OSDP_OK);
    ck_assert(osdp_data_open(&a2, p, 5000, 8) == OSDP_OK);
    ck_assert_uint_eq(osdp_data_hash(&a), osdp_data_hash(&a2));
    ck_assert_uint_ne(osdp_data_hash(&a), osdp_data_hash(&b));
    ck_assert_uint_ne(osdp_data_hash(&a), osdp_data_hash(&c));
    osdp_data_close(&a);
    osdp_data_close(&b);
    osdp_data_close(&c);
    osdp_data_close(&a2);
    free(tok);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* bad input                                                                 */

START_TEST(test_err_missing)
{
    const char *p = tmp_path("does_not_exist.bin");
    expect_fail(p, 256, 8, OSDP_ERR_IO, "No such file", p);
    const char *t = tmp_path("does_not_exist.txt");
    expect_fail(t, 256, 8, OSDP_ERR_IO, "cannot open", t);
}
END_TEST

/* The user nobody, whom root becomes to meet a file it may not read (root reads anything:
 * CAP_DAC_OVERRIDE), as CI and every container run the tests. */
enum { NOBODY_ID = 65534 };

/* the refusal of an unreadable shard, checked in a child that runs as nobody; its exit status
 * says what it found: 0 refused as expected, 1 opened, 2 another status or message, 3 setuid failed */
static int unreadable_as_nobody(const char *path)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (setgid(NOBODY_ID) != 0 || setuid(NOBODY_ID) != 0)
            _exit(3);
        osdp_dataset ds;
        osdp_status rc = osdp_data_open(&ds, path, 256, 8);
        const char *msg = osdp_error_message();
        if (rc == OSDP_OK)
            _exit(1);
        _exit(rc == OSDP_ERR_IO && strstr(msg, "Permission denied") && strstr(msg, path) ? 0 : 2);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    return WEXITSTATUS(status);
}

START_TEST(test_err_unreadable)
{
    uint16_t tok[32] = {0};
    const char *p = tmp_path("noperm.bin");
    write_shard(p, tok, 32);
    ck_assert_int_eq(chmod(p, 0), 0);
    if (geteuid() != 0) {
        expect_fail(p, 256, 8, OSDP_ERR_IO, "Permission denied", p);
        return;
    }
    /* the folder open to nobody, so that the file's own mode is what refuses */
    ck_assert_int_eq(chmod(g_tmp, 0711), 0);
    int found = unreadable_as_nobody(p);
    ck_assert_msg(found == 0, "an unreadable shard read as the user nobody: %s",
                  found == 1 ? "it opened" : found == 2 ? "another status or a message without the reason and the path"
                                                       : "setuid(nobody) failed");
}
END_TEST

START_TEST(test_err_short_header)
{
    const char *p = tmp_path("short.bin");
    write_bytes(p, "\x28\x0e\x35\x01", 4);
    expect_fail(p, 256, 8, OSDP_ERR_INPUT, "shorter", p);
    const char *e = tmp_path("empty.bin");
    write_bytes(e, "", 0);
    expect_fail(e, 256, 8, OSDP_ERR_INPUT, "header", e);
}
END_TEST

START_TEST(test_err_magic)
{
    uint16_t tok[32] = {0};
    const char *p = tmp_path("magic.bin");
    write_shard_raw(p, 12345, 1, 32, tok, 32);
    expect_fail(p, 256, 8, OSDP_ERR_INPUT, "magic", p);
    ck_assert_ptr_nonnull(strstr(osdp_error_message(), "12345"));
    ck_assert_ptr_nonnull(strstr(osdp_error_message(), "20240520"));
}
END_TEST

START_TEST(test_err_version)
{
    uint16_t tok[32] = {0};
    const char *p = tmp_path("version.bin");
    write_shard_raw(p, OSDP_SHARD_MAGIC, 2, 32, tok, 32);
    expect_fail(p, 256, 8, OSDP_ERR_INPUT, "version", p);
    ck_assert_ptr_nonnull(strstr(osdp_error_message(), "2"));
}
END_TEST

START_TEST(test_err_size)
{
    uint16_t tok[32] = {0};
    const char *p = tmp_path("size.bin");
    write_shard_raw(p, OSDP_SHARD_MAGIC, 1, 40, tok, 32); /* header claims more */
    expect_fail(p, 256, 8, OSDP_ERR_INPUT, "size", p);
    ck_assert_ptr_nonnull(strstr(osdp_error_message(), "1088")); /* actual */
    ck_assert_ptr_nonnull(strstr(osdp_error_message(), "1104")); /* expected */
    const char *q = tmp_path("size2.bin");
    write_shard_raw(q, OSDP_SHARD_MAGIC, 1, 20, tok, 32); /* trailing data */
    expect_fail(q, 256, 8, OSDP_ERR_INPUT, "size", q);
    const char *r = tmp_path("size3.bin");
    write_shard_raw(r, OSDP_SHARD_MAGIC, 1, -5, tok, 32);
    expect_fail(r, 256, 8, OSDP_ERR_INPUT, "count", r);
}
END_TEST

START_TEST(test_err_vocab_token)
{
    uint16_t *tok = pattern(20000, 1, 0, 100);
    tok[12345] = 300;
    const char *p = tmp_path("vocab.bin");
    write_shard(p, tok, 20000);
    expect_fail(p, 256, 8, OSDP_ERR_INPUT, "vocab", p);
    const char *msg = osdp_error_message();
    ck_assert_msg(strstr(msg, "300") && strstr(msg, "12345") && strstr(msg, "256"), "%s", msg);
    /* vocab exactly large enough passes */
    osdp_dataset ds;
    ck_assert_msg(osdp_data_open(&ds, p, 301, 8) == OSDP_OK, "%s", osdp_error_message());
    osdp_data_close(&ds);

    /* inside a directory the message names the shard */
    const char *dir = tmp_path("vocabdir");
    make_dir(dir);
    char good[600], bad[600];
    snprintf(good, sizeof good, "%s/a.bin", dir);
    snprintf(bad, sizeof bad, "%s/b.bin", dir);
    write_shard(good, tok, 100);
    write_shard(bad, tok, 20000);
    expect_fail(dir, 256, 8, OSDP_ERR_INPUT, "vocab", bad);
    free(tok);
}
END_TEST

START_TEST(test_err_too_short)
{
    uint16_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const char *p = tmp_path("few.bin");
    write_shard(p, tok, 8);
    expect_fail(p, 256, 8, OSDP_ERR_INPUT, "shorter", p); /* needs 9 */
    ck_assert_ptr_nonnull(strstr(osdp_error_message(), "8 tokens"));
    ck_assert_ptr_nonnull(strstr(osdp_error_message(), "9"));
    const char *z = tmp_path("zero.bin");
    write_shard(z, tok, 0);
    expect_fail(z, 256, 1, OSDP_ERR_INPUT, "shorter", z);
    const char *t = tmp_path("few.txt");
    write_bytes(t, "abc", 3);
    expect_fail(t, 256, 3, OSDP_ERR_INPUT, "shorter", t);
    const char *e = tmp_path("empty.txt");
    write_bytes(e, "", 0);
    expect_fail(e, 256, 1, OSDP_ERR_INPUT, "shorter", e);
}
END_TEST

START_TEST(test_err_directory)
{
    const char *d = tmp_path("emptydir");
    make_dir(d);
    expect_fail(d, 256, 8, OSDP_ERR_INPUT, "no .bin", d);
    expect_fail(d, 256, 8, OSDP_ERR_INPUT, "empty", d);
    const char *d2 = tmp_path("textdir");
    make_dir(d2);
    char path[600];
    snprintf(path, sizeof path, "%s/notes.txt", d2);
    write_bytes(path, "hello world", 11);
    expect_fail(d2, 256, 8, OSDP_ERR_INPUT, "no .bin", d2);
    /* a bad shard among good ones fails the whole directory */
    const char *d3 = tmp_path("baddir");
    make_dir(d3);
    uint16_t tok[64] = {0};
    snprintf(path, sizeof path, "%s/0.bin", d3);
    write_shard(path, tok, 64);
    snprintf(path, sizeof path, "%s/1.bin", d3);
    write_shard_raw(path, 7, 1, 64, tok, 64);
    expect_fail(d3, 256, 8, OSDP_ERR_INPUT, "magic", path);
    /* validation shards alone are nothing to train on */
    const char *d4 = tmp_path("valdir");
    make_dir(d4);
    snprintf(path, sizeof path, "%s/corpus_val_000000.bin", d4);
    write_shard(path, tok, 64);
    expect_fail(d4, 256, 8, OSDP_ERR_INPUT, "only validation shards", d4);
}
END_TEST

START_TEST(test_err_text_vocab)
{
    const char *p = tmp_path("small_vocab.txt");
    write_bytes(p, "0123456789+=\n0123456789", 23);
    expect_fail(p, 100, 8, OSDP_ERR_INPUT, "vocab", p);
    ck_assert_ptr_nonnull(strstr(osdp_error_message(), "256"));
}
END_TEST

START_TEST(test_err_arguments)
{
    uint16_t tok[16] = {0};
    const char *p = tmp_path("args.bin");
    write_shard(p, tok, 16);
    expect_fail(p, 0, 8, OSDP_ERR_INPUT, "vocab", p);
    expect_fail(p, 256, 0, OSDP_ERR_INPUT, "sequence", p);
    osdp_dataset ds;
    ck_assert(osdp_data_open(&ds, "", 256, 8) == OSDP_ERR_INPUT);
    osdp_data_close(&ds);
}
END_TEST

START_TEST(test_embedded_corpus)
{
    /* the default corpus, in the source tree that make check names (or the current folder) */
    const char *src = getenv("OSDP_SRCDIR");
    char p[4096];
    snprintf(p, sizeof p, "%s/input/data/addition.txt", src && *src ? src : ".");
    ck_assert_msg(access(p, R_OK) == 0, "no corpus at %s: run from the source tree or set OSDP_SRCDIR", p);
    osdp_dataset ds;
    ck_assert_msg(osdp_data_open(&ds, p, 256, 64) == OSDP_OK, "%s", osdp_error_message());
    ck_assert_uint_gt(ds.n_tokens, 100000);
    int in[4 * 64], tg[4 * 64];
    osdp_data_batch(&ds, 1, 0, 0, 4, 64, in, tg);
    for (int i = 0; i < 4 * 64; i++) {
        int c = in[i];
        ck_assert_msg((c >= '0' && c <= '9') || c == '+' || c == '=' || c == '\n', "unexpected byte %d", c);
    }
    osdp_data_close(&ds);
}
END_TEST

/* ------------------------------------------------------------------------ */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static Suite *data_suite(void)
{
    const TTest *read[] = {test_shard_roundtrip, test_text_read, test_directory_concat, test_embedded_corpus, NULL};
    const TTest *batch[] = {test_batch_determinism, test_targets_shifted, test_exact_minimum_length,
                            test_hash_sensitivity, NULL};
    const TTest *errors[] = {test_err_missing, test_err_unreadable, test_err_short_header, test_err_magic,
                             test_err_version, test_err_size, test_err_vocab_token, test_err_too_short,
                             test_err_directory, test_err_text_vocab, test_err_arguments, NULL};
    const osdp_check_case cases[] = {
        {.name = "read", .tests = read}, {.name = "batch", .tests = batch}, {.name = "errors", .tests = errors},
    };
    return osdp_check_suite("data", cases, sizeof cases / sizeof cases[0]);
}

/* the tests' files go to a fresh directory, removed after the run */
static int data_setup(void)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/osdp_test_data_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    return 0;
}

static void data_teardown(void)
{
    nftw(g_tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const osdp_check_program osdp_check_this_program = {.suite = data_suite, .setup = data_setup,
                                                    .teardown = data_teardown};
