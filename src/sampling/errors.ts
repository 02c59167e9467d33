// bloomery sampling: typed errors of the sampler (bad parameters, bad inputs to a sampling step).

/**
 * A sampling parameter has a bad value. `field` is the llama-server request field it comes from
 * (e.g. "repeat_penalty"), so a route can answer 400 naming it.
 */
export class SamplingParamError extends Error {
  override readonly name = "SamplingParamError";
  constructor(
    readonly field: string,
    readonly detail: string,
  ) {
    super(`invalid "${field}": ${detail}`);
  }
}

/** A sampling step cannot run: logits of the wrong size, a token id outside the vocabulary, NaN logits. */
export class SamplingError extends Error {
  override readonly name = "SamplingError";
  constructor(message: string) {
    super(message);
  }
}
