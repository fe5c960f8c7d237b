/* hex.h - the value of a hexadecimal digit (base floor: any file may use it).
 *
 * Any thread; pure. For percent-escapes, token digests and JSON's \u
 * escapes, which each read hex digits a byte at a time. */
#ifndef HW_HEX_H
#define HW_HEX_H

/* The value of c as a hex digit (0-9, a-f, A-F), or -1. */
static inline int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
