/**
 * Base of every failure raised by the pure core. Each module narrows `code` to its own
 * stable strings; callers map codes to the public error table in src/errors.ts (for
 * example a policy that fails its schema becomes the deny reason
 * `policy_verification_failed`). Messages never carry request or policy values.
 */
export class CoreError<C extends string = string> extends Error {
  readonly code: C;

  constructor(code: C, message: string) {
    super(message);
    this.name = new.target.name;
    this.code = code;
  }
}
