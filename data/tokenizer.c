/* The byte-level tokenizer: token = byte value, so any text round-trips and
 * the vocabulary is BYTE_VOCAB (256). */
#include "data.h"

size_t tokenize_bytes(const unsigned char *text, size_t n, uint16_t *out) {
    for (size_t i = 0; i < n; i++) out[i] = text[i];
    return n;
}

char detokenize_byte(int token) {
    if (token < 0 || token >= BYTE_VOCAB) return '?';
    return (char)(unsigned char)token;
}
