/**
 * Whether text holds something shaped like a JWT (header and payload segments). A bare "eyJ" is
 * not enough: a sealed blob's base64 holds those three characters by chance (about once per 260 kB).
 */
export function containsJwt(text: string): boolean {
  return /eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}/.test(text);
}
