// Example plugin `strings`, written in JavaScript: slugs and title case.
//
// Built with componentize-js (see build.sh). Each exported interface is an
// exported object named after it in camelCase; throwing a string from a function
// whose WIT result is `result<_, string>` returns it as the error. `capabilities`
// turns anything else thrown (an Error) into such a string, or the component
// would trap and the agent read a bare `capability failed`.

/**
 * Makes anything a method of `object` throws its capability's failure: the agent
 * reads `capability failed: ReferenceError: Intl is not defined`, the operator
 * log gets the stack. A thrown string is the failure message as it is.
 */
function capabilities(object) {
  for (const [name, method] of Object.entries(object)) {
    if (typeof method !== "function") {
      continue;
    }
    object[name] = function (...args) {
      let result;
      try {
        result = method.apply(this, args);
      } catch (error) {
        if (typeof error === "string") {
          throw error;
        }
        console.error(error instanceof Error ? `${error}\n${error.stack}` : error);
        throw explain(error);
      }
      if (result !== null && typeof result === "object" && typeof result.then === "function") {
        throw `${name} returned a Promise: a capability returns its value (no async functions)`;
      }
      return result;
    };
  }
  return object;
}

/** A thrown value as text: an Error as `Name: message`, anything else as JSON. */
function explain(error) {
  if (error instanceof Error) {
    return String(error);
  }
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}

// componentize-js's engine has no Unicode normalization (String.prototype.normalize
// is missing), so accents are folded with a table of the common Latin letters.
const FOLD = {
  à: "a", á: "a", â: "a", ã: "a", ä: "a", å: "a", æ: "ae", ç: "c",
  è: "e", é: "e", ê: "e", ë: "e", ì: "i", í: "i", î: "i", ï: "i",
  ñ: "n", ò: "o", ó: "o", ô: "o", õ: "o", ö: "o", ø: "o", œ: "oe",
  ù: "u", ú: "u", û: "u", ü: "u", ý: "y", ÿ: "y", ß: "ss",
};

/** Lower-case ASCII words of `text`, common accents folded (é -> e). */
function words(text) {
  return Array.from(text.toLowerCase(), (c) => FOLD[c] ?? c)
    .join("")
    .split(/[^a-z0-9]+/)
    .filter((w) => w.length > 0);
}

export const strings = capabilities({
  slugify(text, separator) {
    const sep = separator ?? "-";
    if (sep.length > 1) {
      throw `separator must be at most one character, got ${JSON.stringify(sep)}`;
    }
    const parts = words(text);
    if (parts.length === 0) {
      throw "text has no letters or digits to make a slug from";
    }
    return { slug: parts.join(sep) };
  },

  titleCase(text) {
    const small = new Set(["a", "an", "and", "as", "at", "but", "by", "for", "in", "of", "on", "or", "the", "to"]);
    const parts = text.trim().split(/\s+/).filter((w) => w.length > 0);
    const titled = parts.map((w, i) => {
      const lower = w.toLowerCase();
      if (i > 0 && i < parts.length - 1 && small.has(lower)) {
        return lower;
      }
      return lower.charAt(0).toUpperCase() + lower.slice(1);
    });
    return { text: titled.join(" ") };
  },
});

export const metadata = {
  describe() {
    return [
      {
        exportName: "strings.slugify",
        name: undefined,
        id: undefined,
        summary: "Turn text into a URL slug: lower-case ASCII words joined by a separator.",
        description: "Accents are removed (é -> e); anything but letters and digits separates words. separator defaults to \"-\" and may be empty or one character.",
        searchTerms: ["slug", "url", "identifier", "kebab case", "permalink"],
      },
      {
        exportName: "strings.title-case",
        name: undefined,
        id: undefined,
        summary: "Capitalize text as a title, keeping short connector words lower-case.",
        description: undefined,
        searchTerms: ["title", "capitalize", "heading", "case"],
      },
    ];
  },
};

// Pure functions of their arguments: a policy that asks before writes lets them
// run.
const pure = { readOnly: true, destructive: undefined, idempotent: true, openWorld: false };

export const annotations = {
  annotate() {
    return [
      { exportName: "strings.slugify", hints: pure },
      { exportName: "strings.title-case", hints: pure },
    ];
  },
};

// Warm-up: componentize-js snapshots the engine after this module's top level has
// run, and every execution starts from that snapshot; what runs here (compiling
// these functions and their regular expressions) is not done again on each first
// call. It runs when the component is built and leaves nothing else behind.
strings.slugify("Warm up");
strings.titleCase("warm up the title");
