// The API client: every call carries the signed-in person's token in the
// Authorization header. The token lives in session storage (gone with the
// tab), never in a URL.

const tokenKey = 'crewlet.token';

export const token = {
  get: () => sessionStorage.getItem(tokenKey) || '',
  set: (t) => sessionStorage.setItem(tokenKey, t),
  clear: () => sessionStorage.removeItem(tokenKey),
};

// APIError is an answer other than 2xx: status, the API's error code and
// its detail (which says what to do).
export class APIError extends Error {
  constructor(status, code, detail) {
    super(detail || code || 'HTTP ' + status);
    this.status = status;
    this.code = code;
  }
}

export function headers(extra) {
  const hs = Object.assign({}, extra);
  const t = token.get();
  if (t) hs.Authorization = 'Bearer ' + t;
  return hs;
}

// api calls METHOD PATH with an optional JSON body and returns the JSON
// answer.
export async function api(method, path, body) {
  return (await request(method, path, body)).data;
}

// getPage reads one page of a listing that names its next page in a header
// (X-Next-Before): the page's entries, and the cursor of the next page, or
// '' when this page is the last.
export async function getPage(path, header) {
  const { data, said } = await getSaying(path, header || 'X-Next-Before');
  return { items: data || [], next: said };
}

// getSaying reads path and what the answer's header says ('' when it has
// none), such as X-Crewlet-Truncated on a read cut at its size limit.
export async function getSaying(path, header) {
  const { data, res } = await request('GET', path);
  return { data, said: res.headers.get(header) || '' };
}

async function request(method, path, body) {
  const init = { method, headers: headers({ Accept: 'application/json' }), credentials: 'omit' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!res.ok) {
    throw new APIError(res.status, data && data.error, data && data.detail);
  }
  return { data, res };
}

export const get = (path) => api('GET', path);
export const post = (path, body) => api('POST', path, body === undefined ? {} : body);

// query makes "?a=1&b=2" from an object, leaving out empty values.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}
