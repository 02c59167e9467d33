// Tokenizer errors: one typed class for every refusal in src/tokenizer/.

/** A vocabulary, option or token id the tokenizer cannot use; the message names what and why. */
export class TokenizerError extends Error {
  override readonly name = "TokenizerError";
  constructor(message: string) {
    super(message);
  }
}
