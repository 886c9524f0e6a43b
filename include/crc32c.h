/* CRC32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), the
 * checksum of iSCSI (RFC 3720), ext4 and SSE4.2's crc32 instruction. Resume
 * states carry one per section (train/ckpt/ckpt_state_format.c). Chained: crc32c(0, a||b) ==
 * crc32c(crc32c(0, a), b), so a section is checksummed in pieces. */
#ifndef SHARDLAB_CRC32C_H
#define SHARDLAB_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The fastest implementation this build has (SSE4.2 when compiled for it). */
uint32_t crc32c(uint32_t crc, const void *data, size_t n);
/* The portable table-driven one, the same values (tests compare the two). */
uint32_t crc32c_portable(uint32_t crc, const void *data, size_t n);
/* Whether crc32c uses the SSE4.2 instruction. */
int crc32c_hardware(void);

#endif
