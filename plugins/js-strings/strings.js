// Example plugin `strings`, written in JavaScript: slugs and title case.
//
// Built with componentize-js (see build.sh). Each exported interface is an
// exported object named after it in camelCase; throwing a string from a function
// whose WIT result is `result<_, string>` returns it as the error. Anything else
// thrown (an Error) must become a string first, or the component traps.

/** Runs `body`; an Error it throws becomes its message, the `string` error. */
function guard(body) {
  try {
    return body();
  } catch (e) {
    throw typeof e === "string" ? e : String(e && e.message ? e.message : e);
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

export const strings = {
  slugify(text, separator) {
    return guard(() => {
      const sep = separator ?? "-";
      if (sep.length > 1) {
        throw `separator must be at most one character, got ${JSON.stringify(sep)}`;
      }
      const parts = words(text);
      if (parts.length === 0) {
        throw "text has no letters or digits to make a slug from";
      }
      return { slug: parts.join(sep) };
    });
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
};

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

// Warm-up: componentize-js snapshots the engine after this module's top level has
// run, and every execution starts from that snapshot; what runs here (compiling
// these functions and their regular expressions) is not done again on each first
// call. It runs when the component is built and leaves nothing else behind.
strings.slugify("Warm up");
strings.titleCase("warm up the title");
