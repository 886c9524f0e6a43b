/* libFuzzer harness: the config file parser (config_load_stream) and the
 * cross-key checks (config_validate) on arbitrary text. Properties checked
 * beyond "no crash, no undefined behaviour, no leak":
 *  - every refusal leaves a message;
 *  - an accepted file round-trips: config_print's text loads back into a
 *    configuration that prints the same text. */
#include "../../train/config/config.h"
#include "fuzz_input.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* config_print's text, in a malloc'd string. */
static char *printed(const struct config *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    FUZZ_CHECK(f != NULL);
    config_print(f, c);
    FUZZ_CHECK(fclose(f) == 0);
    return text;
}

/* Loads size bytes of text over the defaults. */
static int load(struct config *c, const void *text, size_t size, char err[CONFIG_ERR_LEN]) {
    config_defaults(c);
    if (size == 0) return 0; /* fmemopen takes no empty buffer; an empty file sets nothing */
    FILE *f = fmemopen((void *)text, size, "r");
    FUZZ_CHECK(f != NULL);
    memset(err, 'x', CONFIG_ERR_LEN);
    int rc = config_load_stream(c, f, "fuzz.conf", err);
    fclose(f);
    if (rc != 0) fuzz_check_message(err, CONFIG_ERR_LEN);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct config c;
    char err[CONFIG_ERR_LEN];
    if (load(&c, data, size, err) != 0) return 0;
    memset(err, 'x', sizeof err);
    if (config_validate(&c, err) != 0) fuzz_check_message(err, sizeof err);

    char *first = printed(&c);
    struct config again;
    if (load(&again, first, strlen(first), err) != 0) {
        fprintf(stderr, "config_print's text does not load back: %s\n--\n%s", err, first);
        abort();
    }
    char *second = printed(&again);
    if (strcmp(first, second) != 0) {
        fprintf(stderr, "round trip differs:\n--\n%s--\n%s", first, second);
        abort();
    }
    free(first);
    free(second);
    return 0;
}
