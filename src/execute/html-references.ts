/**
 * HTML named character references (the WHATWG HTML table) whose value is one character of
 * ASCII or Latin-1 — every character a credential is made of in practice — for the decoded
 * views of a response (decoded-views.ts). Names for other characters are not decoded there;
 * numeric references (`&#233;`, `&#xE9;`) cover every character.
 */

/** `name:hex` pairs, names as written before the `;`. */
const REFERENCES =
  "AElig:c6 AMP:26 Aacute:c1 Acirc:c2 Agrave:c0 Aring:c5 Atilde:c3 Auml:c4 COPY:a9 Ccedil:c7 " +
  "Cedilla:b8 CenterDot:b7 DiacriticalAcute:b4 DiacriticalGrave:60 Dot:a8 DoubleDot:a8 ETH:d0 " +
  "Eacute:c9 Ecirc:ca Egrave:c8 Euml:cb GT:3e Hat:5e Iacute:cd Icirc:ce Igrave:cc Iuml:cf LT:3c " +
  "NewLine:a NonBreakingSpace:a0 Ntilde:d1 Oacute:d3 Ocirc:d4 Ograve:d2 Oslash:d8 Otilde:d5 Ouml:d6 " +
  "PlusMinus:b1 QUOT:22 REG:ae THORN:de Tab:9 Uacute:da Ucirc:db Ugrave:d9 UnderBar:5f Uuml:dc " +
  "VerticalLine:7c Yacute:dd aacute:e1 acirc:e2 acute:b4 aelig:e6 agrave:e0 amp:26 angst:c5 apos:27 " +
  "aring:e5 ast:2a atilde:e3 auml:e4 brvbar:a6 bsol:5c ccedil:e7 cedil:b8 cent:a2 centerdot:b7 " +
  "circledR:ae colon:3a comma:2c commat:40 copy:a9 curren:a4 deg:b0 die:a8 div:f7 divide:f7 " +
  "dollar:24 eacute:e9 ecirc:ea egrave:e8 equals:3d eth:f0 euml:eb excl:21 frac12:bd frac14:bc " +
  "frac34:be grave:60 gt:3e half:bd iacute:ed icirc:ee iexcl:a1 igrave:ec iquest:bf iuml:ef " +
  "laquo:ab lbrace:7b lbrack:5b lcub:7b lowbar:5f lpar:28 lsqb:5b lt:3c macr:af micro:b5 midast:2a " +
  "middot:b7 nbsp:a0 not:ac ntilde:f1 num:23 oacute:f3 ocirc:f4 ograve:f2 ordf:aa ordm:ba oslash:f8 " +
  "otilde:f5 ouml:f6 para:b6 percnt:25 period:2e plus:2b plusmn:b1 pm:b1 pound:a3 quest:3f quot:22 " +
  "raquo:bb rbrace:7d rbrack:5d rcub:7d reg:ae rpar:29 rsqb:5d sect:a7 semi:3b shy:ad sol:2f " +
  "strns:af sup1:b9 sup2:b2 sup3:b3 szlig:df thorn:fe times:d7 uacute:fa ucirc:fb ugrave:f9 uml:a8 " +
  "uuml:fc verbar:7c vert:7c yacute:fd yen:a5 yuml:ff";

/** Names an HTML parser also accepts without the `;` (legacy references). */
const WITHOUT_SEMICOLON =
  "AElig AMP Aacute Acirc Agrave Aring Atilde Auml COPY Ccedil ETH Eacute Ecirc Egrave Euml GT " +
  "Iacute Icirc Igrave Iuml LT Ntilde Oacute Ocirc Ograve Oslash Otilde Ouml QUOT REG THORN Uacute " +
  "Ucirc Ugrave Uuml Yacute aacute acirc acute aelig agrave amp aring atilde auml brvbar ccedil " +
  "cedil cent copy curren deg divide eacute ecirc egrave eth euml frac12 frac14 frac34 gt iacute " +
  "icirc iexcl igrave iquest iuml laquo lt macr micro middot nbsp not ntilde oacute ocirc ograve " +
  "ordf ordm oslash otilde ouml para plusmn pound quot raquo reg sect shy sup1 sup2 sup3 szlig " +
  "thorn times uacute ucirc ugrave uml uuml yacute yen yuml";

const byName: ReadonlyMap<string, string> = new Map(
  REFERENCES.split(" ").map((pair) => {
    const [name = "", hex = "0"] = pair.split(":");
    return [name, String.fromCharCode(Number.parseInt(hex, 16))];
  }),
);
const legacyNames: ReadonlySet<string> = new Set(WITHOUT_SEMICOLON.split(" "));

/** Longest name in the table: a reference longer than this is not looked up. */
export const MAX_REFERENCE_NAME = Math.max(...[...byName.keys()].map((name) => name.length));

/** The character a `&name;` reference stands for, or undefined. */
export function namedReference(name: string, withSemicolon: boolean): string | undefined {
  if (!withSemicolon && !legacyNames.has(name)) return undefined;
  return byName.get(name);
}
